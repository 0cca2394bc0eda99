//! Admission: a fixed set of run slots and a bounded wait queue.
//!
//! A request takes a slot (its index picks the run's uid and cgroup) or waits
//! in a queue of bounded length; a full queue is refused at once, and a wait
//! that outlives the caller's deadline gives up without running anything.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a request was not admitted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdmissionError {
    #[error("all {slots} run slots are busy and the wait queue ({queue}) is full")]
    QueueFull { slots: usize, queue: usize },
    #[error("deadline reached while waiting for a run slot")]
    Deadline,
    #[error("the executor is draining and accepts no new runs")]
    Draining,
}

/// The slots and the queue.
#[derive(Debug)]
pub struct Admission {
    slots: usize,
    queue_capacity: usize,
    sem: Arc<Semaphore>,
    free: Mutex<Vec<usize>>,
    waiting: AtomicUsize,
    draining: AtomicBool,
}

/// A held slot; released on drop.
#[derive(Debug)]
pub struct SlotGuard {
    index: usize,
    owner: Arc<Admission>,
    _permit: OwnedSemaphorePermit,
}

impl SlotGuard {
    /// The slot's index, in `0..slots`.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        if let Ok(mut free) = self.owner.free.lock() {
            free.push(self.index);
        }
    }
}

struct Waiting<'a>(&'a AtomicUsize);
impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Admission {
    /// `slots` run slots and a queue of `queue_capacity` waiters.
    pub fn new(slots: usize, queue_capacity: usize) -> Arc<Self> {
        Arc::new(Admission {
            slots,
            queue_capacity,
            sem: Arc::new(Semaphore::new(slots)),
            free: Mutex::new((0..slots).rev().collect()),
            waiting: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
        })
    }

    /// Takes a free slot, waiting in the queue until `deadline` if needed.
    pub async fn acquire(
        self: &Arc<Self>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<SlotGuard, AdmissionError> {
        if self.draining.load(Ordering::SeqCst) {
            return Err(AdmissionError::Draining);
        }
        let permit = match self.sem.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.queue_capacity {
                    self.waiting.fetch_sub(1, Ordering::SeqCst);
                    return Err(AdmissionError::QueueFull {
                        slots: self.slots,
                        queue: self.queue_capacity,
                    });
                }
                let _w = Waiting(&self.waiting);
                let wait = self.sem.clone().acquire_owned();
                let got = match deadline {
                    Some(d) => tokio::time::timeout_at(d, wait)
                        .await
                        .map_err(|_| AdmissionError::Deadline)?,
                    None => wait.await,
                };
                got.map_err(|_| AdmissionError::Draining)?
            }
        };
        let index = self.free.lock().ok().and_then(|mut f| f.pop()).unwrap_or(0);
        Ok(SlotGuard {
            index,
            owner: self.clone(),
            _permit: permit,
        })
    }

    /// Refuses new requests from now on.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Slots in use now.
    pub fn busy(&self) -> usize {
        self.slots - self.sem.available_permits()
    }

    /// Requests waiting now.
    pub fn queued(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Total slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Queue capacity.
    pub fn queue_capacity(&self) -> usize {
        self.queue_capacity
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn full_queue_is_refused_and_deadline_gives_up() {
        let a = Admission::new(1, 1);
        let held = a.acquire(None).await.unwrap();
        let a2 = a.clone();
        let waiter = tokio::spawn(async move { a2.acquire(None).await.map(|g| g.index()) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(a.queued(), 1);
        assert_eq!(
            a.acquire(None).await.unwrap_err(),
            AdmissionError::QueueFull { slots: 1, queue: 1 }
        );
        drop(held);
        assert_eq!(waiter.await.unwrap().unwrap(), 0);

        let held = a.acquire(None).await.unwrap();
        let d = tokio::time::Instant::now() + Duration::from_millis(30);
        assert_eq!(a.acquire(Some(d)).await.unwrap_err(), AdmissionError::Deadline);
        assert_eq!(a.queued(), 0);
        drop(held);
    }

    #[tokio::test]
    async fn slots_get_distinct_indices() {
        let a = Admission::new(3, 0);
        let g: Vec<_> = futures::future::join_all((0..3).map(|_| a.acquire(None))).await;
        let mut idx: Vec<usize> = g.iter().map(|g| g.as_ref().unwrap().index()).collect();
        idx.sort();
        assert_eq!(idx, vec![0, 1, 2]);
    }
}
