//! Caller authentication: an optional shared bearer token.
//!
//! When configured (`--auth-token-file`, or `SANDPOOL_AUTH_TOKEN`), every call
//! of `sandpool.v1.Executor` must carry `authorization: Bearer <token>` and
//! every HTTP API call the same header; others get UNAUTHENTICATED / 401 and
//! nothing runs. gRPC health and reflection, `/v1/ping` and `/metrics` stay
//! open: probes carry no token. Tokens are compared in constant time.

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
        let Some(given) = strip_bearer(h) else { return false };
        bool::from(given.ct_eq(&self.0))
    }
}

fn strip_bearer(h: &[u8]) -> Option<&[u8]> {
    let (scheme, rest) = h.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then(|| rest.trim_ascii())
}

/// A gRPC interceptor for [`Token`]; `None` lets everything through.
pub fn interceptor(
    token: Option<Token>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |req: tonic::Request<()>| match &token {
        None => Ok(req),
        Some(t) if t.accepts(req.metadata().get("authorization").map(|v| v.as_bytes())) => Ok(req),
        Some(_) => Err(tonic::Status::unauthenticated(
            "missing or wrong bearer token (metadata `authorization: Bearer <token>`)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
