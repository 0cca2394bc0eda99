//! The pool's auth Secret: a random bearer token the executors require from callers.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::child_meta;
use crate::resolve::{AUTH_TOKEN_KEY, ResolvedPool};

/// The Secret holding `token`, when the operator is to create it (`spec.auth.enabled` with no
/// `secretName`). It is created only if absent and never overwritten, so a rotated or
/// user-set token survives.
pub fn auth_secret(pool: &ResolvedPool, token: &str) -> Option<Secret> {
    let auth = pool.auth.as_ref().filter(|a| a.create)?;
    Some(Secret {
        metadata: ObjectMeta {
            name: Some(auth.secret_name.clone()),
            ..child_meta(pool)
        },
        type_: Some("Opaque".to_owned()),
        string_data: Some(BTreeMap::from([(AUTH_TOKEN_KEY.to_owned(), token.to_owned())])),
        ..Default::default()
    })
}

/// A fresh token: 32 bytes from the OS's generator, hex-encoded.
pub fn random_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
