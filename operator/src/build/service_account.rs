//! The executor pods' ServiceAccount.

use k8s_openapi::api::core::v1::ServiceAccount;

use super::child_meta;
use crate::resolve::ResolvedPool;

/// A ServiceAccount that never gets a token: executors never talk to the API server, and
/// untrusted code must find no credentials in the pod.
pub fn service_account(pool: &ResolvedPool) -> ServiceAccount {
    ServiceAccount {
        metadata: child_meta(pool),
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}
