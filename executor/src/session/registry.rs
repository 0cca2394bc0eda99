//! The table of an executor's sessions and who may reach one: ids, owners (compared in
//! constant time), access tokens, lookups, listings and the sessions' metrics.

use super::record::{Session, SessionInfo};
use super::{SessionError, SessionManager};
use crate::error::ExecError;
use sha2::Digest;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// 128 bits from the kernel's CSPRNG, as hex.
pub(crate) fn random_hex() -> Result<String, ExecError> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| ExecError::Internal(format!("getrandom: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// 128 random bits, hex, then `-` and the executor's name (its pod's): a pool's gateway
/// routes a session's calls by the id alone, with no shared store.
pub(super) fn new_id(executor: &str) -> Result<String, ExecError> {
    Ok(format!("{}-{executor}", random_hex()?))
}

/// The check a session's later calls pass: same `authorization` as its creator's.
pub(super) fn owner_matches(s: &Session, auth: &[u8]) -> bool {
    bool::from(s.owner.as_slice().ct_eq(auth))
}

impl SessionManager {
    /// Publishes `tenant`'s open sessions, from the table `m`.
    pub(super) fn publish(&self, m: &HashMap<String, Arc<Session>>, tenant: &str) {
        let metrics = self.engine.metrics();
        metrics.sessions.set(m.len() as i64);
        metrics.tenant_sessions(tenant, m.values().filter(|s| *s.tenant == *tenant).count());
    }

    /// The session `id`, whoever asks.
    pub(super) fn lookup(&self, id: &str) -> Result<Arc<Session>, SessionError> {
        self.sessions
            .lock()
            .ok()
            .and_then(|m| m.get(id).cloned())
            .ok_or(SessionError::NotFound)
    }

    pub(super) fn find(&self, id: &str, auth: &[u8]) -> Result<Arc<Session>, SessionError> {
        if id.is_empty() {
            return Err(ExecError::invalid("session_id", "required").into());
        }
        let s = self.lookup(id).map_err(|_| self.not_live(id, auth))?;
        // Another caller's session looks like no session at all.
        if !owner_matches(&s, auth) {
            return Err(SessionError::NotFound);
        }
        Ok(s)
    }

    /// The owner a session's calls authenticate as, given its id and the data-plane secret
    /// its creator was given ([`super::Extras::access_token`]); compared in constant time. A
    /// session without one, a wrong secret and an unknown id all look alike: NOT_FOUND.
    /// Also its creator's tenant (what its streams count against).
    pub fn by_access(&self, id: &str, token: &[u8]) -> Result<(Vec<u8>, Arc<crate::tenants::Tenant>), SessionError> {
        let s = self.lookup(id)?;
        let current = s
            .access_token
            .as_ref()
            .is_some_and(|t| bool::from(t.as_bytes().ct_eq(token)));
        // One given before a pause (only its hash was stored).
        let earlier = || {
            let h = sha2::Sha256::digest(token);
            s.earlier_tokens
                .iter()
                .any(|e| bool::from(e.as_slice().ct_eq(h.as_slice())))
        };
        match current || (s.access_token.is_some() && earlier()) {
            true => Ok((s.owner.clone(), s.ticket.tenant.clone())),
            false => Err(SessionError::NotFound),
        }
    }

    /// What `auth`'s session `id` is.
    pub fn info(&self, id: &str, auth: &[u8]) -> Result<SessionInfo, SessionError> {
        self.find(id, auth).map(|s| s.info())
    }

    /// `auth`'s sessions whose metadata holds every pair of `metadata`, oldest first.
    pub fn list(&self, auth: &[u8], metadata: &BTreeMap<String, String>) -> Vec<SessionInfo> {
        let mut all: Vec<SessionInfo> = self
            .sessions
            .lock()
            .map(|m| {
                m.values()
                    .filter(|s| owner_matches(s, auth))
                    .filter(|s| metadata.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
                    .map(|s| s.info())
                    .collect()
            })
            .unwrap_or_default();
        all.sort_by(|a, b| a.started_at.cmp(&b.started_at).then_with(|| a.id.cmp(&b.id)));
        all
    }

    /// Moves the end of `auth`'s session `id` to `after` from now, never past its lifetime.
    pub fn set_end(&self, id: &str, auth: &[u8], after: Duration) -> Result<SessionInfo, SessionError> {
        let s = self.find(id, auth)?;
        let life = s.totals.lifetime.saturating_sub(s.created.elapsed());
        if let Ok(mut e) = s.end_at.lock() {
            *e = Some(Instant::now() + after.min(life));
        }
        s.touch();
        Ok(s.info())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_long_random_and_distinct() {
        let a = new_id("pool-7f9c-x2").unwrap();
        let b = new_id("pool-7f9c-x2").unwrap();
        let (hex, name) = a.split_at(32);
        assert!(hex.chars().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_eq!(name, "-pool-7f9c-x2", "the executor's name follows, for the gateway");
        assert_ne!(a, b);
    }
}
