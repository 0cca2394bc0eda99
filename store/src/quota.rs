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

/// How long a tenant's listed usage is trusted: past it, the next put lists the tenant's blobs
/// again (so the puts of other executors sharing the store count from then on).
pub(crate) const USAGE_FRESH: std::time::Duration = std::time::Duration::from_secs(10);

/// Each tenant's committed blobs (stored bytes by key), as last listed, with this store's own
/// commits and deletes since: a put's quota checks read it instead of listing the tenant's
/// blobs twice per put, which at 10,000 paused sessions cost more than the pause itself.
#[derive(Debug, Default)]
pub(crate) struct Usage {
    tenants: Mutex<HashMap<String, Tenant>>,
}

#[derive(Debug, Default)]
struct Tenant {
    /// The last listing, when it was made, and its total.
    listed: Option<(std::time::Instant, HashMap<String, u64>, u64)>,
    /// Listings in progress, and the commits (Some) and deletes (None) made meanwhile, which
    /// each listing applies to what it found (it may or may not have seen them).
    listing: usize,
    journal: Vec<(String, Option<u64>)>,
}

/// A listing in progress ([`Usage::begin`]): where the journal stood when it began.
#[derive(Debug)]
pub(crate) struct Listing(usize);

impl Usage {
    /// `tenant`'s committed bytes but those under `except`, if listed within [`USAGE_FRESH`].
    pub(crate) fn get(&self, tenant: &str, except: Option<&str>) -> Option<u64> {
        let t = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let (at, blobs, total) = t.get(tenant)?.listed.as_ref()?;
        if at.elapsed() >= USAGE_FRESH {
            return None;
        }
        let skip = except.and_then(|e| blobs.get(e)).copied().unwrap_or(0);
        Some(total.saturating_sub(skip))
    }

    /// A listing of `tenant` begins.
    pub(crate) fn begin(&self, tenant: &str) -> Listing {
        let mut t = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let e = t.entry(tenant.to_owned()).or_default();
        e.listing += 1;
        Listing(e.journal.len())
    }

    /// A listing of `tenant` found `blobs` (None: it failed); kept with what changed meanwhile.
    pub(crate) fn end(&self, tenant: &str, listing: Listing, blobs: Option<HashMap<String, u64>>) {
        let mut t = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let e = t.entry(tenant.to_owned()).or_default();
        if let Some(mut blobs) = blobs {
            for (rel, stored) in e.journal.iter().skip(listing.0) {
                match stored {
                    Some(n) => blobs.insert(rel.clone(), *n),
                    None => blobs.remove(rel),
                };
            }
            let total = blobs.values().sum();
            e.listed = Some((std::time::Instant::now(), blobs, total));
        }
        e.listing = e.listing.saturating_sub(1);
        if e.listing == 0 {
            e.journal.clear();
        }
    }

    /// This store committed `stored` bytes under `rel` (`tenant`'s), or deleted it (None).
    pub(crate) fn changed(&self, tenant: &str, rel: &str, stored: Option<u64>) {
        let mut t = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(e) = t.get_mut(tenant) else { return };
        if e.listing > 0 {
            e.journal.push((rel.to_owned(), stored));
        }
        if let Some((_, blobs, total)) = e.listed.as_mut() {
            let old = match stored {
                Some(n) => blobs.insert(rel.to_owned(), n),
                None => blobs.remove(rel),
            };
            *total = total
                .saturating_sub(old.unwrap_or(0))
                .saturating_add(stored.unwrap_or(0));
        }
    }
}
