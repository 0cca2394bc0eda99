//! Admission: a fixed set of run slots and a bounded wait queue.
//!
//! A request takes a slot (its index picks the run's uid and cgroup) or waits
//! in a queue of bounded length; a full queue is refused at once, and a wait
//! that outlives the caller's deadline gives up without running anything.
//!
//! Draining (on SIGTERM) refuses new requests and wakes every queued one with
//! [`AdmissionError::Draining`] at once, so its client retries on another
//! executor; what already runs finishes, including the later runs of a
//! request admitted earlier ([`Admit::Continuing`], e.g. an Evaluate's tests).

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

/// Whose slot request this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// A request not yet admitted: refused, even while queued, once draining.
    New,
    /// A later run of a request admitted before draining began: it finishes.
    Continuing,
}

/// The slots and the queue.
#[derive(Debug)]
pub struct Admission {
    slots: usize,
    queue_capacity: usize,
    sem: Arc<Semaphore>,
    free: Mutex<Vec<usize>>,
    waiting: AtomicUsize,
    /// Requests (Execute calls, Evaluates) between their start and their response, whatever
    /// phase they are in: an Evaluate gives its slot back between its runs.
    requests: AtomicUsize,
    draining: AtomicBool,
    drained: tokio::sync::watch::Sender<bool>,
}

/// One request in progress, counted until dropped (see [`Admission::request`]).
#[derive(Debug)]
pub struct InProgress(Arc<Admission>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::SeqCst);
    }
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
            requests: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            drained: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Takes a free slot for a new request, waiting in the queue until `deadline` if needed.
    pub async fn acquire(
        self: &Arc<Self>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<SlotGuard, AdmissionError> {
        self.acquire_as(deadline, Admit::New).await
    }

    /// Takes a free slot, waiting in the queue until `deadline` if needed.
    pub async fn acquire_as(
        self: &Arc<Self>,
        deadline: Option<tokio::time::Instant>,
        admit: Admit,
    ) -> Result<SlotGuard, AdmissionError> {
        let new = admit == Admit::New;
        if new && self.is_draining() {
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
                let mut drained = self.drained.subscribe();
                let sem = self.sem.clone();
                let wait = async move {
                    tokio::select! {
                        p = sem.acquire_owned() => p.map_err(|_| AdmissionError::Draining),
                        _ = drained.wait_for(|d| *d), if new => Err(AdmissionError::Draining),
                    }
                };
                let got = match deadline {
                    Some(d) => tokio::time::timeout_at(d, wait)
                        .await
                        .map_err(|_| AdmissionError::Deadline)?,
                    None => wait.await,
                };
                got?
            }
        };
        let index = self.free.lock().ok().and_then(|mut f| f.pop()).unwrap_or(0);
        Ok(SlotGuard {
            index,
            owner: self.clone(),
            _permit: permit,
        })
    }

    /// Refuses new requests from now on, and the queued ones at once.
    pub fn drain(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.drained.send_replace(true);
    }

    /// True once [`Admission::drain`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Slots in use now.
    pub fn busy(&self) -> usize {
        self.slots - self.sem.available_permits()
    }

    /// Counts a request as in progress until the guard is dropped: a drain waits for these,
    /// not for idle slots.
    pub fn request(self: &Arc<Self>) -> InProgress {
        self.requests.fetch_add(1, Ordering::SeqCst);
        InProgress(self.clone())
    }

    /// Requests in progress now (see [`Admission::request`]).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
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
    async fn drain_refuses_queued_new_requests_but_not_continuing_ones() {
        let a = Admission::new(1, 4);
        let held = a.acquire(None).await.unwrap();
        let (a1, a2) = (a.clone(), a.clone());
        let queued = tokio::spawn(async move { a1.acquire(None).await.map(|g| g.index()) });
        let continuing = tokio::spawn(async move { a2.acquire_as(None, Admit::Continuing).await.map(|g| g.index()) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        a.drain();
        assert_eq!(queued.await.unwrap(), Err(AdmissionError::Draining));
        assert_eq!(a.acquire(None).await.unwrap_err(), AdmissionError::Draining);
        drop(held);
        assert_eq!(continuing.await.unwrap(), Ok(0));
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
