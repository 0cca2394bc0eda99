//! One resume of a session at a time, per session: resumes of different sessions (another
//! tenant's among them) never wait for each other, so one slow resume (a large archive, a
//! slow or hung store) holds up only its own session's callers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

type Lock = Arc<tokio::sync::Mutex<()>>;

/// The per-session locks, each kept only while someone holds or waits for it.
#[derive(Debug, Default)]
pub(super) struct Resuming(Mutex<HashMap<String, Lock>>);

/// Held while session `id` is resumed (or closed while paused).
pub(super) struct Held<'a> {
    set: &'a Resuming,
    id: String,
    lock: Lock,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Resuming {
    /// Waits for `id`'s lock.
    pub(super) async fn lock(&self, id: &str) -> Held<'_> {
        let lock = {
            let mut m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            m.entry(id.to_owned()).or_default().clone()
        };
        let guard = lock.clone().lock_owned().await;
        Held {
            set: self,
            id: id.to_owned(),
            lock,
            _guard: guard,
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut m = self.set.0.lock().unwrap_or_else(PoisonError::into_inner);
        // The map's, this one's and its guard's: no one else waits for it.
        if Arc::strong_count(&self.lock) == 3 {
            m.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn sessions_lock_apart_and_locks_go_when_unused() {
        let r = Resuming::default();
        let a = r.lock("a").await;
        // Another session's lock is free while a's is held.
        let b = tokio::time::timeout(std::time::Duration::from_secs(5), r.lock("b"))
            .await
            .expect("b does not wait for a");
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(50), r.lock("a"))
                .await
                .is_err(),
            "a second lock of a waits"
        );
        drop((a, b));
        assert_eq!(r.len(), 0);
        drop(r.lock("a").await);
        assert_eq!(r.len(), 0);
    }
}
