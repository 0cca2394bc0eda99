//! One budget of bytes the executor holds in memory on its callers' behalf, across every
//! connection and both APIs: request bodies as they arrive (gRPC and HTTP, before decoding,
//! so a request is refused before it costs its full size), each request an `EvaluateStream`
//! has read, and the files read for a reply (`fetch_files`, `GetSessionFiles`).
//!
//! Per-request caps (`--max-request-bytes`, the fetch caps) bound one caller; they do not
//! bound a thousand callers at once: 16 parallel 48 MiB requests once took 760 MiB, 20
//! parallel session file reads 1.3 GiB. A caller that would take the executor past the
//! budget is refused at once (`RESOURCE_EXHAUSTED`, HTTP 503) and can retry or go to
//! another executor; nothing waits for budget, so a stalled sender cannot queue others
//! behind it, only hold what it has already sent (until the body deadline cuts it off).
//!
//! A [`Charge`] is one request's share: cloned into the body reader, the request's
//! handler and the reply, and given back when the last clone is dropped.

use prometheus_client::metrics::counter::Counter;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The executor's byte budget. Cheap to clone: clones share it.
#[derive(Debug, Clone)]
pub struct ByteBudget {
    sem: Arc<Semaphore>,
    total: u64,
    /// Counts every refusal (`sandpool_resource_exhausted_total{reason="inflight_bytes"}`).
    refusals: Counter,
}

/// Taking more would exceed the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the executor holds its limit of {total} bytes of requests and replies in flight (--max-inflight-bytes); retry shortly or elsewhere"
)]
pub struct Exhausted {
    pub total: u64,
}

impl ByteBudget {
    /// A budget of `total` bytes (at most what a semaphore can count).
    pub fn new(total: u64) -> Self {
        let total = total.min(Semaphore::MAX_PERMITS as u64);
        ByteBudget {
            sem: Arc::new(Semaphore::new(usize::try_from(total).unwrap_or(Semaphore::MAX_PERMITS))),
            total,
            refusals: Counter::default(),
        }
    }

    /// This budget, counting its refusals in `refusals`.
    pub fn counting(self, refusals: Counter) -> Self {
        ByteBudget { refusals, ..self }
    }

    /// Refusals so far.
    pub fn refusals(&self) -> u64 {
        self.refusals.get()
    }

    /// The budget's size.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Bytes charged now, by every request together.
    pub fn in_use(&self) -> u64 {
        self.total - self.sem.available_permits() as u64
    }

    /// A new, empty charge against this budget.
    pub fn charge(&self) -> Charge {
        Charge {
            budget: self.clone(),
            held: Arc::new(Mutex::new(None)),
        }
    }
}

/// One request's bytes. Clones share it; the bytes go back when the last clone drops.
#[derive(Debug, Clone)]
pub struct Charge {
    budget: ByteBudget,
    held: Arc<Mutex<Option<OwnedSemaphorePermit>>>,
}

impl Charge {
    /// Adds `n` bytes to this charge, or refuses if the budget has not that many left.
    pub fn take(&self, n: u64) -> Result<(), Exhausted> {
        if n == 0 {
            return Ok(());
        }
        let refused = || {
            self.budget.refusals.inc();
            Exhausted {
                total: self.budget.total,
            }
        };
        let n = u32::try_from(n).map_err(|_| refused())?;
        let permit = self
            .budget
            .sem
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| refused())?;
        // A poisoned lock only means another clone panicked mid-merge; the permits are still counted.
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match held.as_mut() {
            Some(h) => h.merge(permit),
            None => *held = Some(permit),
        }
        Ok(())
    }

    /// Bytes this charge holds.
    pub fn held(&self) -> u64 {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.as_ref().map_or(0, |p| p.num_permits() as u64)
    }
}

pub mod grpc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_refuse_past_the_total_and_give_back_on_the_last_drop() {
        let b = ByteBudget::new(100);
        let c = b.charge();
        c.take(60).expect("60 of 100");
        let c2 = c.clone();
        c2.take(30).expect("90 of 100");
        assert_eq!(c.held(), 90);
        assert_eq!(b.in_use(), 90);
        let other = b.charge();
        assert_eq!(other.take(20), Err(Exhausted { total: 100 }));
        assert_eq!(b.in_use(), 90, "a refused take holds nothing");
        assert_eq!(b.refusals(), 1, "and is counted");
        other.take(10).expect("exactly the rest");
        drop(c);
        assert_eq!(b.in_use(), 100, "a clone still holds the first charge");
        drop(c2);
        assert_eq!(b.in_use(), 10);
        drop(other);
        assert_eq!(b.in_use(), 0);
    }

    #[test]
    fn a_take_larger_than_a_semaphore_can_count_is_refused_not_truncated() {
        let b = ByteBudget::new(u64::MAX);
        assert!(b.charge().take(u64::from(u32::MAX) + 1).is_err());
        assert_eq!(b.in_use(), 0);
        assert_eq!(b.refusals(), 1);
    }
}
