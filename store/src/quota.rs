//! Bytes being stored right now, per tenant: a put's bytes count against its tenant's quota
//! as they stream, before the backend's listing can see them, so concurrent puts cannot
//! together pass it; and one lock per tenant that puts take to check and commit, one at a
//! time, so each commit's listing sees every earlier commit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Bytes in flight per tenant.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    tenants: Mutex<HashMap<String, u64>>,
    commits: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl InFlight {
    /// A put's charge for `tenant`, empty; released when dropped.
    pub(crate) fn charge(self: &Arc<Self>, tenant: &str) -> Charge {
        Charge {
            flight: Arc::clone(self),
            tenant: tenant.to_owned(),
            bytes: 0,
        }
    }

    /// The lock `tenant`'s puts hold while they check their quota a last time and commit.
    pub(crate) fn commit_lock(&self, tenant: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut c = self.commits.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(c.entry(tenant.to_owned()).or_default())
    }

    /// Bytes `tenant` has in flight.
    pub(crate) fn of(&self, tenant: &str) -> u64 {
        let t = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        t.get(tenant).copied().unwrap_or(0)
    }
}

/// One put's bytes in flight.
#[derive(Debug)]
pub(crate) struct Charge {
    flight: Arc<InFlight>,
    tenant: String,
    bytes: u64,
}

impl Charge {
    /// This put's bytes so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Adds `n` bytes if the tenant's in-flight bytes stay within `room` (its quota less what
    /// it holds); otherwise adds nothing and returns the in-flight total it would have made.
    pub(crate) fn add(&mut self, n: u64, room: u64) -> Result<(), u64> {
        let mut t = self.flight.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let cur = t.entry(self.tenant.clone()).or_insert(0);
        let next = cur.saturating_add(n);
        if next > room {
            return Err(next);
        }
        *cur = next;
        self.bytes += n;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let mut t = self.flight.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cur) = t.get_mut(&self.tenant) {
            *cur = cur.saturating_sub(self.bytes);
            if *cur == 0 {
                t.remove(&self.tenant);
            }
        }
    }
}
