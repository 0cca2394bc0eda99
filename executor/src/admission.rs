//! Admission: a fixed set of run slots, and per-tenant wait queues served by fair share.
//!
//! A request takes a slot (its index picks the run's uid and cgroup) or waits in its
//! tenant's queue at its priority. When a slot frees, the next waiter is chosen in two
//! weighted steps (docs/tenants.md, "Fair share"): first the priority, by the weights
//! interactive 16 : normal 4 : batch 1, then the tenant within it, by tenant weight; within
//! one tenant and priority, first come first served. Both steps are stride scheduling: each
//! class has a pass that grows by `STRIDE / weight` per grant, the lowest pass goes next, and
//! a class that had nobody waiting starts at the current virtual time, so being idle banks no
//! credit. A tenant at its `max_concurrency` is skipped until one of its runs ends.
//!
//! A tenant's full queue (`max_queue`, default `--queue`) refuses that tenant at once; a wait
//! that outlives the caller's deadline gives up without running anything.
//!
//! Draining (on SIGTERM) refuses new requests and wakes every queued one with
//! [`AdmissionError::Draining`] at once, so its client retries on another executor; what
//! already runs finishes, including the later runs of a request admitted earlier
//! ([`Admit::Continuing`], e.g. an Evaluate's tests), which also pass a full queue: their
//! request was admitted.
//!
//! Each grant records when it was taken and its allowance ([`Admission::set_allowance`]: the
//! longest a holder may legitimately keep a slot); [`Admission::overdue`] lists the slots held
//! past it, for the watchdog (a holder stuck in a wait that never ends holds its slot forever).

use crate::tenants::{Priority, Tenant};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Why a request was not admitted.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdmissionError {
    #[error(
        "tenant {tenant:?} already has {queue} requests waiting for this executor's {slots} run slots (its max_queue); retry later or on another executor"
    )]
    QueueFull { tenant: String, slots: usize, queue: usize },
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

/// Who asks for a slot, and how urgently: a request's tenant and priority, carried to every
/// run of it.
#[derive(Debug, Clone)]
pub struct Ticket {
    pub tenant: Arc<Tenant>,
    pub priority: Priority,
}

impl Default for Ticket {
    /// The anonymous tenant at normal priority (the CLI, probes, tests).
    fn default() -> Self {
        Ticket {
            tenant: Tenant::anonymous(),
            priority: Priority::Normal,
        }
    }
}

/// Fixed-point unit of the strides. 720720 is the least common multiple of 1..=16, so
/// `STRIDE / weight` is exact for the priority weights and tenant weights up to 16 (larger
/// ones round, off by under one grant in 2^32); u128 passes never overflow.
const STRIDE: u128 = 720_720 << 32;

/// One waiter: where its slot index is sent.
#[derive(Debug)]
struct Waiter {
    tx: oneshot::Sender<usize>,
}

/// A tenant's queues and counts on this executor.
#[derive(Debug, Default)]
struct Account {
    /// Per priority: waiters in arrival order (some may have given up; see `live`).
    queues: [VecDeque<Waiter>; 3],
    /// Per priority: waiters still waiting.
    live: [usize; 3],
    /// Per priority: the tenant's pass among the tenants at that priority.
    pass: [u128; 3],
    running: usize,
    /// Its terms as last presented (a reloaded tenants file updates them).
    weight: u128,
    max_concurrency: usize,
}

impl Account {
    fn queued(&self) -> usize {
        self.live.iter().sum()
    }
}

/// Everything the scheduler decides on, under one lock.
#[derive(Debug)]
struct State {
    free: Vec<usize>,
    accounts: HashMap<Arc<str>, Account>,
    /// Per priority: its pass among the priorities.
    level_pass: [u128; 3],
    /// The pass of the last priority served (where a newly busy priority starts).
    level_vtime: u128,
    /// Per priority: the pass of the last tenant served at it.
    tenant_vtime: [u128; 3],
    /// Per priority: waiters still waiting.
    level_live: [usize; 3],
    queued: usize,
    /// Slots handed out, in total (tests count grants with it).
    grants: u64,
    /// Per slot index: the grant holding it now, if any.
    held: Vec<Option<Grant>>,
}

/// A slot's current grant: whose, since when, and for how long it may be held.
#[derive(Debug, Clone)]
struct Grant {
    tenant: Arc<str>,
    since: Instant,
    allowance: Duration,
}

/// A slot held past its allowance (see [`Admission::overdue`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overdue {
    pub index: usize,
    pub tenant: Arc<str>,
    /// How long it has been held.
    pub held: Duration,
    pub allowance: Duration,
}

/// The slots and the queues.
#[derive(Debug)]
pub struct Admission {
    slots: usize,
    queue_capacity: usize,
    state: Mutex<State>,
    /// Requests (Execute calls, Evaluates) between their start and their response, whatever
    /// phase they are in: an Evaluate gives its slot back between its runs.
    requests: AtomicUsize,
    draining: AtomicBool,
    drained: tokio::sync::watch::Sender<bool>,
    /// What a grant taken now may hold its slot for (see [`Admission::set_allowance`]).
    allowance: Mutex<Duration>,
}

/// One request in progress, counted until dropped (see [`Admission::request`]).
#[derive(Debug)]
pub struct InProgress(Arc<Admission>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A held slot; released on drop (and handed to the next waiter).
#[derive(Debug)]
pub struct SlotGuard {
    index: usize,
    tenant: Arc<str>,
    owner: Arc<Admission>,
}

impl SlotGuard {
    /// The slot's index, in `0..slots`.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut st = self.owner.lock();
        st.release(self.index, &self.tenant);
        st.dispatch();
    }
}

/// A waiter's side while it waits; takes itself out of the counts (or gives back a slot
/// handed to it meanwhile) if dropped before it got one.
struct Pending<'a> {
    owner: &'a Admission,
    rx: oneshot::Receiver<usize>,
    tenant: Arc<str>,
    level: usize,
    done: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Under the lock: dispatch sends under it too, so the slot is either here or not sent.
        let mut st = self.owner.lock();
        self.rx.close();
        match self.rx.try_recv() {
            Ok(index) => {
                st.release(index, &self.tenant);
                st.dispatch();
            }
            Err(_) => {
                if let Some(a) = st.accounts.get_mut(&self.tenant) {
                    let level = self.level;
                    a.live[level] = a.live[level].saturating_sub(1);
                    // Waiters that gave up stay queued until popped; a tenant that cannot run
                    // (at its max_concurrency) while its callers keep timing out would pile them
                    // up without bound. Swept once they outnumber the live ones: amortised O(1).
                    let q = &mut a.queues[level];
                    if q.len() > 2 * a.live[level] + 16 {
                        q.retain(|w| !w.tx.is_closed());
                    }
                }
                st.level_live[self.level] = st.level_live[self.level].saturating_sub(1);
                st.queued = st.queued.saturating_sub(1);
                // Its tenant's other waiters may now be the ones to run.
                st.dispatch();
            }
        }
    }
}

impl State {
    fn release(&mut self, index: usize, tenant: &str) {
        if let Some(a) = self.accounts.get_mut(tenant) {
            a.running = a.running.saturating_sub(1);
        }
        if let Some(h) = self.held.get_mut(index) {
            *h = None;
        }
        self.free.push(index);
    }

    /// Hands free slots to waiters, in fair-share order, while both remain.
    fn dispatch(&mut self) {
        while !self.free.is_empty() && self.queued > 0 {
            let Some((tenant, level)) = self.next() else { return };
            let Some(a) = self.accounts.get_mut(&tenant) else {
                return;
            };
            // The queue's front may hold waiters that gave up: they are not counted in `live`.
            let Some(w) = std::iter::from_fn(|| a.queues[level].pop_front()).find(|w| !w.tx.is_closed()) else {
                // Cannot happen (a waiter that gives up is uncounted under this lock); if it
                // did, the counts follow the queue rather than loop.
                let lost = std::mem::take(&mut a.live[level]);
                self.level_live[level] -= lost;
                self.queued -= lost;
                continue;
            };
            let Some(index) = self.free.pop() else { return };
            if let Err(index) = w.tx.send(index) {
                // Its receiver closed after the check (not under our lock): not counted as live.
                self.free.push(index);
                continue;
            }
            a.live[level] -= 1;
            a.running += 1;
            let (stride, pass) = (STRIDE / a.weight.max(1), a.pass[level]);
            a.pass[level] += stride;
            self.tenant_vtime[level] = pass;
            self.level_live[level] -= 1;
            self.queued -= 1;
            let priority = Priority::ALL[level];
            self.level_vtime = self.level_pass[level];
            self.level_pass[level] += STRIDE / u128::from(priority.weight());
            self.grants += 1;
        }
    }

    /// The tenant and priority to serve next: the priority with the lowest pass among those
    /// with a waiter whose tenant may run more, then the tenant with the lowest pass in it.
    fn next(&self) -> Option<(Arc<str>, usize)> {
        let mut best: Option<(u128, u128, Arc<str>, usize)> = None;
        for (name, a) in &self.accounts {
            if a.running >= a.max_concurrency {
                continue;
            }
            for level in 0..3 {
                if a.live[level] == 0 {
                    continue;
                }
                let key = (self.level_pass[level], a.pass[level]);
                // Ties: the higher priority (lower level), then the name, so the order is stable.
                let better = match &best {
                    None => true,
                    Some((lp, tp, n, l)) => (key.0, level, key.1, name) < (*lp, *l, *tp, n),
                };
                if better {
                    best = Some((key.0, key.1, name.clone(), level));
                }
            }
        }
        best.map(|(_, _, name, level)| (name, level))
    }
}

impl Admission {
    /// `slots` run slots, and `queue_capacity` waiters per tenant unless its terms say.
    pub fn new(slots: usize, queue_capacity: usize) -> Arc<Self> {
        Arc::new(Admission {
            slots,
            queue_capacity,
            state: Mutex::new(State {
                free: (0..slots).rev().collect(),
                accounts: HashMap::new(),
                level_pass: [0; 3],
                level_vtime: 0,
                tenant_vtime: [0; 3],
                level_live: [0; 3],
                queued: 0,
                grants: 0,
                held: vec![None; slots],
            }),
            requests: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            drained: tokio::sync::watch::Sender::new(false),
            // Until the engine sets one from its ceilings: never overdue.
            allowance: Mutex::new(Duration::MAX),
        })
    }

    /// How long a slot granted from now on may be held before [`Admission::overdue`] lists it
    /// (the engine sets it from its ceilings: see `crate::watchdog::slot_allowance`).
    pub fn set_allowance(&self, allowance: Duration) {
        *self.allowance.lock().unwrap_or_else(|p| p.into_inner()) = allowance;
    }

    /// The slots held now past their grant's allowance, the longest-held first.
    pub fn overdue(&self) -> Vec<Overdue> {
        let now = Instant::now();
        let st = self.lock();
        let mut v: Vec<Overdue> = st
            .held
            .iter()
            .enumerate()
            .filter_map(|(index, g)| {
                let g = g.as_ref()?;
                let held = now.saturating_duration_since(g.since);
                (held > g.allowance).then(|| Overdue {
                    index,
                    tenant: g.tenant.clone(),
                    held,
                    allowance: g.allowance,
                })
            })
            .collect();
        v.sort_by_key(|o| std::cmp::Reverse(o.held));
        v
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements that can panic: a poisoned lock is usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a new request of the anonymous tenant at normal priority (probes, tests).
    pub async fn acquire(
        self: &Arc<Self>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<SlotGuard, AdmissionError> {
        self.acquire_as(&Ticket::default(), deadline, Admit::New).await
    }

    /// Takes a free slot for `ticket`, waiting in its tenant's queue until `deadline` if needed.
    pub async fn acquire_as(
        self: &Arc<Self>,
        ticket: &Ticket,
        deadline: Option<tokio::time::Instant>,
        admit: Admit,
    ) -> Result<SlotGuard, AdmissionError> {
        let new = admit == Admit::New;
        if new && self.is_draining() {
            return Err(AdmissionError::Draining);
        }
        let tenant = &ticket.tenant;
        let level = ticket.priority.index();
        let (tx, rx) = oneshot::channel();
        {
            let mut st = self.lock();
            let cap = tenant.max_queue.unwrap_or(self.queue_capacity);
            let st = &mut *st;
            let a = st.accounts.entry(tenant.name.clone()).or_default();
            a.weight = u128::from(tenant.weight.max(1));
            a.max_concurrency = tenant.max_concurrency.unwrap_or(self.slots).clamp(1, self.slots.max(1));
            // Refused only when it would have to wait: a free slot it may take is no queue.
            // (Free slots and waiters that may run never coexist: dispatch would have paired them.)
            let would_wait = st.free.is_empty() || a.running >= a.max_concurrency;
            if new && would_wait && a.queued() >= cap {
                return Err(AdmissionError::QueueFull {
                    tenant: tenant.name.to_string(),
                    slots: self.slots,
                    queue: cap,
                });
            }
            if a.live[level] == 0 {
                // Idle until now: start at the current virtual times, with no credit banked.
                a.pass[level] = a.pass[level].max(st.tenant_vtime[level]);
            }
            if st.level_live[level] == 0 {
                st.level_pass[level] = st.level_pass[level].max(st.level_vtime);
            }
            a.queues[level].push_back(Waiter { tx });
            a.live[level] += 1;
            st.level_live[level] += 1;
            st.queued += 1;
            st.dispatch();
        }
        let mut pending = Pending {
            owner: self,
            rx,
            tenant: tenant.name.clone(),
            level,
            done: false,
        };
        let mut drained = self.drained.subscribe();
        let wait = async {
            tokio::select! {
                i = &mut pending.rx => i.map_err(|_| AdmissionError::Draining),
                _ = drained.wait_for(|d| *d), if new => Err(AdmissionError::Draining),
            }
        };
        let got = match deadline {
            Some(d) => tokio::time::timeout_at(d, wait)
                .await
                .unwrap_or(Err(AdmissionError::Deadline)),
            None => wait.await,
        };
        let index = got?;
        pending.done = true;
        let allowance = *self.allowance.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = self.lock().held.get_mut(index) {
            *h = Some(Grant {
                tenant: tenant.name.clone(),
                since: Instant::now(),
                allowance,
            });
        }
        Ok(SlotGuard {
            index,
            tenant: tenant.name.clone(),
            owner: self.clone(),
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
        self.slots - self.lock().free.len()
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
        self.lock().queued
    }

    /// Per tenant seen so far: (name, runs now, requests waiting now).
    pub fn tenants(&self) -> Vec<(Arc<str>, usize, usize)> {
        let st = self.lock();
        let mut v: Vec<_> = st
            .accounts
            .iter()
            .map(|(n, a)| (n.clone(), a.running, a.queued()))
            .collect();
        v.sort();
        v
    }

    /// Entries in the waiting queues, including waiters that gave up and are not yet swept
    /// (tests bound it).
    pub fn queue_entries(&self) -> usize {
        let st = self.lock();
        st.accounts
            .values()
            .flat_map(|a| a.queues.iter())
            .map(VecDeque::len)
            .sum()
    }

    /// Slots handed out since start-up.
    pub fn grants(&self) -> u64 {
        self.lock().grants
    }

    /// Total slots.
    pub fn slots(&self) -> usize {
        self.slots
    }

    /// The queue capacity of a tenant whose terms do not set one.
    pub fn queue_capacity(&self) -> usize {
        self.queue_capacity
    }
}

#[cfg(test)]
mod tests;
