//! Caller authentication: bearer tokens, each a tenant's (see [`crate::tenants`]).
//!
//! With a tenants file (`--tenants-file`) or the single shared token
//! (`--auth-token-file`, or `SANDPOOL_AUTH_TOKEN`: one tenant, `default`), every call
//! of `sandpool.v1.Executor` must carry `authorization: Bearer <token>` and
//! every HTTP API call the same header; others get UNAUTHENTICATED / 401 and
//! nothing runs. gRPC health and reflection, `/v1/ping` and `/metrics` stay
//! open: probes carry no token. Tokens are compared in constant time.

use crate::tenants::{Directory, Tenants};
use std::path::Path;
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// The token callers must present.
#[derive(Clone)]
pub struct Token(Arc<[u8]>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Errors loading the token.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("--auth-token-file {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: the token is empty")]
    Empty(String),
    #[error("both --auth-token-file and SANDPOOL_AUTH_TOKEN are set; set one")]
    Both,
    #[error(
        "--tenants-file and the single token (--auth-token-file, SANDPOOL_AUTH_TOKEN) are both set; set one (a tenants file can hold that token as one tenant)"
    )]
    TenantsAndToken,
    #[error("--tenants-file {0}")]
    Tenants(#[from] crate::tenants::TenantsError),
    #[error(
        "{0} is under {1}, which restricted-mode runs can read (they share the executor's uid): keep tokens outside --ro-paths"
    )]
    ReadableByRuns(String, String),
}

/// Refuses a token file that runs could read: in restricted mode they see the
/// `ro_paths` with the executor's own permissions.
pub fn check_out_of_reach(file: &Path, ro_paths: &[std::path::PathBuf]) -> Result<(), AuthError> {
    match crate::tenants::under_any(file, ro_paths) {
        Some(p) => Err(AuthError::ReadableByRuns(
            file.display().to_string(),
            p.display().to_string(),
        )),
        None => Ok(()),
    }
}

impl Token {
    /// The token from `file` (surrounding whitespace removed) or `env_value`; None when neither is set.
    pub fn load(file: Option<&Path>, env_value: Option<String>) -> Result<Option<Token>, AuthError> {
        let env_value = env_value.filter(|v| !v.is_empty());
        let (raw, from) = match (file, env_value) {
            (Some(_), Some(_)) => return Err(AuthError::Both),
            (Some(p), None) => (
                std::fs::read_to_string(p).map_err(|e| AuthError::Read(p.display().to_string(), e))?,
                p.display().to_string(),
            ),
            (None, Some(v)) => (v, "SANDPOOL_AUTH_TOKEN".to_owned()),
            (None, None) => return Ok(None),
        };
        let t = raw.trim();
        if t.is_empty() {
            return Err(AuthError::Empty(from));
        }
        Ok(Some(Token(t.as_bytes().into())))
    }

    /// A token from its text (tests, embedding).
    pub fn new(t: &str) -> Token {
        Token(t.as_bytes().into())
    }

    /// True when `header` (an `authorization` value) is `Bearer <this token>`.
    pub fn accepts(&self, header: Option<&[u8]>) -> bool {
        let Some(h) = header else { return false };
        let Some(given) = crate::tenants::strip_bearer(h) else {
            return false;
        };
        bool::from(given.ct_eq(&self.0))
    }

    /// The single-token mode's tenant table: one tenant, `default`.
    pub fn into_tenants(self) -> Arc<Tenants> {
        Tenants::fixed(Directory::single(&self.0))
    }
}

/// A gRPC interceptor: refuses calls without a tenant's token and hands the caller's
/// tenant (an `Arc<Tenant>` extension) to the service. An open table lets everyone in as
/// `anonymous`.
pub fn interceptor(
    tenants: Arc<Tenants>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |mut req: tonic::Request<()>| {
        let header = req.metadata().get("authorization").map(|v| v.as_bytes());
        match tenants.authenticate(header) {
            Ok(tenant) => {
                req.extensions_mut().insert(tenant);
                Ok(req)
            }
            Err(e) => Err(tonic::Status::unauthenticated(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_under_a_path_runs_read_is_refused() {
        let ro = vec![std::path::PathBuf::from("/etc"), std::path::PathBuf::from("/usr")];
        assert!(matches!(
            check_out_of_reach(Path::new("/etc/sandpool/auth/token"), &ro),
            Err(AuthError::ReadableByRuns(..))
        ));
        assert!(check_out_of_reach(Path::new("/sandpool-auth/token"), &ro).is_ok());
        // Not fooled by a prefix that is not a path component.
        assert!(check_out_of_reach(Path::new("/etcetera/token"), &ro).is_ok());
    }

    #[test]
    fn bearer_tokens_are_checked() {
        let t = Token::new("s3cret");
        assert!(t.accepts(Some(b"Bearer s3cret")));
        assert!(t.accepts(Some(b"bearer s3cret ")));
        assert!(!t.accepts(Some(b"Bearer s3cre")));
        assert!(!t.accepts(Some(b"Bearer s3cret2")));
        assert!(!t.accepts(Some(b"Basic s3cret")));
        assert!(!t.accepts(Some(b"s3cret")));
        assert!(!t.accepts(None));
    }

    #[test]
    fn loading() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("t");
        std::fs::write(&f, "tok\n").unwrap();
        assert!(
            Token::load(Some(&f), None)
                .unwrap()
                .unwrap()
                .accepts(Some(b"Bearer tok"))
        );
        assert!(Token::load(None, Some("x".into())).unwrap().is_some());
        assert!(Token::load(None, Some(String::new())).unwrap().is_none());
        assert!(Token::load(Some(&f), Some("x".into())).is_err());
        std::fs::write(&f, "\n").unwrap();
        assert!(Token::load(Some(&f), None).is_err());
    }
}
