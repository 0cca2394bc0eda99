//! Tenants: the callers of a pool, each with a token in a Secret, a share and caps. The
//! operator renders them into the executor's tenants file; the tokens stay in the Secrets.

use std::collections::BTreeSet;

use super::invalid::InvalidSpec;
use crate::crd::{Auth, Priority, Tenant};

/// Largest tenant weight the executor accepts.
pub const MAX_TENANT_WEIGHT: u32 = 1000;
/// Weight of a tenant that names none (the executor's default too).
pub const DEFAULT_TENANT_WEIGHT: u32 = 1;
/// The executor's tenant of callers without auth; a tenants file may not use the name.
const ANONYMOUS: &str = "anonymous";

/// One tenant, checked; unset caps stay unset so the executor's defaults apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedTenant {
    /// Tenant name (a DNS label: it also names the directory its token is mounted in).
    pub name: String,
    /// Secret holding its token.
    pub secret_name: String,
    /// Key of the token in that Secret.
    pub secret_key: String,
    /// Share of slots among tenants at the same priority.
    pub weight: u32,
    /// Runs at once per pod.
    pub max_concurrency: Option<u32>,
    /// Waiting requests per pod.
    pub max_queue: Option<u32>,
    /// Open sessions per pod.
    pub max_sessions: Option<u32>,
    /// Highest priority it may ask for.
    pub max_priority: Option<Priority>,
}

/// The executor's tenant-name rule: `[a-z0-9]([a-z0-9-]*[a-z0-9])?`, at most 63.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Kubernetes' rule for Secret keys: `[-._a-zA-Z0-9]+`, at most 253, and not `.` or `..`.
fn valid_secret_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// A Secret name: a DNS-1123 subdomain.
fn valid_secret_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

/// A cap the schema bounds below by 0; the operator checks again for `render`.
fn cap(value: Option<i32>, field: String) -> Result<Option<u32>, InvalidSpec> {
    value
        .map(|v| u32::try_from(v).map_err(|_| InvalidSpec::new(field, "must not be negative")))
        .transpose()
}

/// The pool's tenants, or `None` when it has none. The executor takes either a tenants file
/// or the single token, so `spec.tenants` with `spec.auth.enabled` is refused.
/// `max_sessions` is the pool's `sessions.maxPerPod`, when set: no tenant's cap may exceed it.
pub(super) fn resolve_tenants(
    spec: Option<&[Tenant]>,
    auth: Option<&Auth>,
    max_sessions: Option<u32>,
) -> Result<Option<Vec<ResolvedTenant>>, InvalidSpec> {
    let Some(list) = spec else {
        return Ok(None);
    };
    if list.is_empty() {
        return Err(InvalidSpec::new(
            "spec.tenants",
            "must list at least one tenant (omit it to run without tenants)",
        ));
    }
    if auth.is_some_and(|a| a.enabled == Some(true)) {
        return Err(InvalidSpec::new(
            "spec.tenants",
            "cannot be set together with spec.auth.enabled: the executor takes either a tenants file or one token; \
             give the token's callers a tenant of their own and turn spec.auth off",
        ));
    }
    let mut seen = BTreeSet::new();
    let mut tenants = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let at = |field: &str| format!("spec.tenants[{i}].{field}");
        if !valid_name(&t.name) {
            return Err(InvalidSpec::new(
                at("name"),
                format!(
                    "{:?} is not a tenant name (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)",
                    t.name
                ),
            ));
        }
        if t.name == ANONYMOUS {
            return Err(InvalidSpec::new(
                at("name"),
                "\"anonymous\" is the executor's tenant of callers without auth",
            ));
        }
        if !seen.insert(t.name.as_str()) {
            return Err(InvalidSpec::new(at("name"), format!("{:?} is listed twice", t.name)));
        }
        if !valid_secret_name(&t.token_secret_ref.name) {
            return Err(InvalidSpec::new(
                at("tokenSecretRef.name"),
                format!("{:?} is not a Secret name", t.token_secret_ref.name),
            ));
        }
        if !valid_secret_key(&t.token_secret_ref.key) {
            return Err(InvalidSpec::new(
                at("tokenSecretRef.key"),
                format!(
                    "{:?} is not a Secret key (letters, digits, '-', '.' and '_')",
                    t.token_secret_ref.key
                ),
            ));
        }
        // The executor refuses a file where two tenants share a token (it could not tell
        // them apart); the operator cannot read tokens, but the same key twice is that.
        let secret_ref = (t.token_secret_ref.name.as_str(), t.token_secret_ref.key.as_str());
        if let Some(other) = list[..i]
            .iter()
            .position(|o| (o.token_secret_ref.name.as_str(), o.token_secret_ref.key.as_str()) == secret_ref)
        {
            return Err(InvalidSpec::new(
                at("tokenSecretRef"),
                format!("is spec.tenants[{other}]'s token too; each tenant needs a token of its own"),
            ));
        }
        let weight = match t.weight {
            None => DEFAULT_TENANT_WEIGHT,
            Some(w) => match u32::try_from(w) {
                Ok(w) if (1..=MAX_TENANT_WEIGHT).contains(&w) => w,
                _ => {
                    return Err(InvalidSpec::new(
                        at("weight"),
                        format!("{w} is outside 1..={MAX_TENANT_WEIGHT}"),
                    ));
                }
            },
        };
        let max_concurrency = match t.max_concurrency {
            // The executor refuses 0; every slot is spelled by leaving the cap out.
            Some(n) if n < 1 => {
                return Err(InvalidSpec::new(
                    at("maxConcurrency"),
                    "must be at least 1 (leave it out for every slot)",
                ));
            }
            n => cap(n, at("maxConcurrency"))?,
        };
        let max_queue = cap(t.max_queue, at("maxQueue"))?;
        let tenant_sessions = cap(t.max_sessions, at("maxSessions"))?;
        // The pod's own cap refuses sessions first, so a tenant cap above it never applies
        // (most likely maxPerPod was lowered and the tenants were not).
        if let (Some(tenant), Some(pool)) = (tenant_sessions, max_sessions)
            && tenant > pool
        {
            return Err(InvalidSpec::new(
                at("maxSessions"),
                format!(
                    "{tenant} exceeds spec.sessions.maxPerPod ({pool}), the sessions each pod holds open; \
                     lower it, or leave it out for the pool's cap"
                ),
            ));
        }
        tenants.push(ResolvedTenant {
            name: t.name.clone(),
            secret_name: t.token_secret_ref.name.clone(),
            secret_key: t.token_secret_ref.key.clone(),
            weight,
            max_concurrency,
            max_queue,
            max_sessions: tenant_sessions,
            max_priority: t.max_priority,
        });
    }
    Ok(Some(tenants))
}
