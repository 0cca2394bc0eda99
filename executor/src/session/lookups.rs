//! A bound on the store lookups E2B's data plane makes for sandboxes this executor does not
//! hold (docs/sessions.md, "Surviving the pod"). Such a call names no tenant, so finding a
//! paused sandbox costs a store read per tenant served; anyone who can reach the HTTP port
//! could otherwise turn each made-up id into that many reads. Ids that no executor makes
//! cost none, and the others share a token bucket: past it, the call is told to retry.

use std::sync::Mutex;
use std::time::Instant;

/// Lookups that may run back to back.
pub(super) const BURST: f64 = 20.0;
/// Lookups a second, once the burst is spent.
pub(super) const PER_SECOND: f64 = 10.0;

/// The bucket (`BURST` deep, refilled at `PER_SECOND`).
#[derive(Debug)]
pub(super) struct Lookups {
    bucket: Mutex<(f64, Instant)>,
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups {
            bucket: Mutex::new((BURST, Instant::now())),
        }
    }
}

impl Lookups {
    /// Takes one lookup from the bucket; false when it is empty.
    pub(super) fn take(&self) -> bool {
        self.take_at(Instant::now())
    }

    fn take_at(&self, now: Instant) -> bool {
        let Ok(mut b) = self.bucket.lock() else {
            return false;
        };
        let (tokens, last) = *b;
        let refilled = (tokens + now.saturating_duration_since(last).as_secs_f64() * PER_SECOND).min(BURST);
        if refilled < 1.0 {
            *b = (refilled, now);
            return false;
        }
        *b = (refilled - 1.0, now);
        true
    }
}

/// Whether `id` has the shape of a session id ([`super::registry::new_id`]): 32 lowercase
/// hex digits, `-`, and an executor's name. Anything else was never paused by anyone.
pub(super) fn session_shaped(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() > 33
        && b[..32].iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        && b[32] == b'-'
        // The store's own rule for ids (characters, length).
        && sandpool_store::BlobKey::paused("t", id).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_bucket_gives_its_burst_then_its_rate() {
        let l = Lookups::default();
        let t0 = Instant::now();
        let first = (0..100).filter(|_| l.take_at(t0)).count();
        assert_eq!(first as f64, BURST);
        let later = (0..100).filter(|_| l.take_at(t0 + Duration::from_secs(1))).count();
        assert_eq!(later as f64, PER_SECOND);
    }

    #[test]
    fn only_session_shaped_ids_are_looked_up() {
        assert!(session_shaped("0123456789abcdef0123456789abcdef-sandpool-exec-7d9f.0"));
        for bad in [
            "",
            "x",
            "0123456789abcdef0123456789abcdef",
            "0123456789abcdef0123456789abcdef-",
            "0123456789ABCDEF0123456789abcdef-e",
            "0123456789abcdef0123456789abcdef-../e",
            "0123456789abcdef0123456789abcdef-é",
            &format!("0123456789abcdef0123456789abcdef-{}", "e".repeat(300)),
        ] {
            assert!(!session_shaped(bad), "{bad:?}");
        }
    }
}
