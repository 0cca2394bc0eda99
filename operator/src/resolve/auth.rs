//! Caller authentication: which Secret holds a pool's bearer token, and who creates it.

use crate::crd::Auth;

/// Name of the token key in a pool's auth Secret.
pub const AUTH_TOKEN_KEY: &str = "token";

/// Where a pool's bearer token lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedAuth {
    /// Secret holding the token under [`AUTH_TOKEN_KEY`].
    pub secret_name: String,
    /// The operator creates the Secret if it does not exist (never overwriting it).
    pub create: bool,
}

/// The pool's auth, when enabled: a named Secret is the author's to create; otherwise the
/// operator creates `<pool>-auth`.
pub(super) fn resolve_auth(spec: Option<&Auth>, pool_name: &str) -> Option<ResolvedAuth> {
    spec.filter(|a| a.enabled == Some(true)).map(|a| match &a.secret_name {
        Some(secret_name) => ResolvedAuth {
            secret_name: secret_name.clone(),
            create: false,
        },
        None => ResolvedAuth {
            secret_name: format!("{pool_name}-auth"),
            create: true,
        },
    })
}
