//! The executor watches itself: a run that outlives its limits by far means a
//! stuck slot, and an async runtime that stops running means nothing answers.
//!
//! - [`Watchdog::track`] registers each run with the time it may take; the
//!   liveness health service (`liveness`, what the kubelet probes) turns
//!   NOT_SERVING while any run is [`STUCK_AFTER`] past its allowance, so the
//!   pod is restarted instead of serving timeouts with SERVING health.
//! - Blocking-pool work ([`crate::task::blocking`]: file and process work off the runtime)
//!   registers in [`BLOCKING`]; liveness turns NOT_SERVING too while any of it has run
//!   [`BLOCKING_STUCK_AFTER`] (a thread the pool will not get back: an open of a FIFO a
//!   sandbox planted once blocked so, and 530 of them took the whole pool). `/v1/ping`
//!   answers 503 while liveness says NOT_SERVING, and the metrics count both kinds.
//! - Run slots ([`crate::admission`]) are watched by how long each grant is held: one held
//!   past [`slot_allowance`] (every legitimate holder is long done by then) means a request
//!   stuck in a wait that never ends, the slot lost to every tenant; liveness turns
//!   NOT_SERVING and a warning names the slot's tenant and how long it has held it.
//! - [`Watchdog::guard_process`] starts an OS thread, outside the runtime it
//!   guards: when the runtime's heartbeat stops for `stall`, or a SIGTERM is
//!   not honoured within `grace`, it logs why, leaves a termination message
//!   and exits. A wedged runtime cannot answer any probe; exiting is the one
//!   answer left, and the next start reclaims the slots.

use crate::admission::Admission;
use crate::limits::LimitPolicy;
use futures::future::BoxFuture;
use sandpool_sandbox::{RunOutcome, RunSpec, SandboxError, WorkDir};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic_health::ServingStatus;

/// The engine's one way into the sandbox (`Engine::run_in`) as its parts see it (start-up
/// probes, shared-artifact builds): a run in sandbox identity `index` that the watchdog
/// tracks, no request's phase.
pub trait RunWatched: Sync {
    fn run_watched<'a>(
        &'a self,
        index: usize,
        work: &'a WorkDir,
        spec: &'a RunSpec,
    ) -> BoxFuture<'a, Result<RunOutcome, SandboxError>>;
}

/// How far past its allowance a run counts as stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

/// How long one piece of blocking-pool work may run before it counts as stuck: the longest
/// legitimate one (copying a compiled work dir, a gzip upload of a whole /work) takes seconds.
pub const BLOCKING_STUCK_AFTER: Duration = Duration::from_secs(120);

/// Room beyond the phases' ceilings in [`slot_allowance`]: the file work around runs (each
/// piece watched on its own, [`BLOCKING_STUCK_AFTER`]), an interpreter's start (30 s at most),
/// a killed run's clean-up.
pub const SLOT_MARGIN: Duration = Duration::from_secs(60);

/// Runs of a language's shared-artifact build (`crate::shared`: its build, a training
/// compile, a training run), each at the ceilings; it happens once, in the slot of the
/// language's first request, and concurrent first requests wait for it in theirs.
const SHARED_BUILD_RUNS: u32 = 3;

/// How long one grant of a run slot may legitimately be held, from the executor's ceilings:
/// the longest holder is an Execute that first builds its language's shared artifacts
/// ([`SHARED_BUILD_RUNS`] runs at the wall-time ceiling), then compiles and runs (two more),
/// or a judge's warm-up at the compile default; plus [`SLOT_MARGIN`]. An Evaluate takes a
/// slot per compile and per test (it gives it back between them), a session call one per
/// call (its wall time is at most the ceiling too), so a request's size never lengthens a
/// grant. With the default ceilings (60 s, compile 30 s): 6.5 minutes.
pub fn slot_allowance(policy: &LimitPolicy) -> Duration {
    policy
        .max
        .wall
        .saturating_mul(SHARED_BUILD_RUNS + 2)
        .saturating_add(policy.compile_defaults.wall)
        .saturating_add(SLOT_MARGIN)
}

/// Blocking-pool work in flight, with when each started.
#[derive(Debug, Default)]
pub struct Jobs {
    next: AtomicU64,
    started: Mutex<BTreeMap<u64, Instant>>,
}

/// The process's blocking-pool work ([`crate::task::blocking`] has no engine at hand).
pub static BLOCKING: Jobs = Jobs::new();

/// One piece of blocking work in flight; dropping it ends it for the watchdog.
#[derive(Debug)]
pub struct Job<'a> {
    jobs: &'a Jobs,
    id: u64,
}

impl Drop for Job<'_> {
    fn drop(&mut self) {
        self.jobs.lock().remove(&self.id);
    }
}

impl Jobs {
    pub const fn new() -> Self {
        Jobs {
            next: AtomicU64::new(0),
            started: Mutex::new(BTreeMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Instant>> {
        self.started.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers work starting now.
    pub fn start(&self) -> Job<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, Instant::now());
        Job { jobs: self, id }
    }

    /// How many pieces of work have run longer than `bound`, and the longest-running one's time.
    pub fn past(&self, bound: Duration) -> (usize, Duration) {
        let now = Instant::now();
        let st = self.lock();
        let ages = st.values().map(|t| now.duration_since(*t));
        let n = ages.clone().filter(|a| *a > bound).count();
        (n, ages.max().unwrap_or_default())
    }
}

/// How often the runtime beats and the checks run.
const TICK: Duration = Duration::from_secs(1);

/// In-flight runs and the runtime's heartbeat.
#[derive(Debug)]
pub struct Watchdog {
    epoch: Instant,
    /// Milliseconds since `epoch` at the runtime's last beat.
    beat_ms: AtomicU64,
    next_id: AtomicU64,
    /// Per run in flight: when it started and how long it may take.
    runs: Mutex<HashMap<u64, (Instant, Duration)>>,
    stuck: AtomicBool,
    /// The blocking-pool work it watches ([`BLOCKING`]; a test's own).
    jobs: &'static Jobs,
    /// The run slots it watches (none: a watchdog of runs and blocking work only).
    slots: Option<Arc<Admission>>,
}

impl Default for Watchdog {
    fn default() -> Self {
        Watchdog {
            epoch: Instant::now(),
            beat_ms: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            runs: Mutex::new(HashMap::new()),
            stuck: AtomicBool::new(false),
            jobs: &BLOCKING,
            slots: None,
        }
    }
}

/// A run in flight; dropping it ends the run for the watchdog.
#[derive(Debug)]
pub struct Tracked {
    dog: Arc<Watchdog>,
    id: u64,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dog.runs.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

impl Watchdog {
    pub fn new() -> Arc<Self> {
        Arc::new(Watchdog::default())
    }

    /// A watchdog that also watches `slots`' grants against their allowance.
    pub fn watching(slots: Arc<Admission>) -> Arc<Self> {
        Arc::new(Watchdog {
            slots: Some(slots),
            ..Watchdog::default()
        })
    }

    /// Registers a run that should end within `allowed` (its wall-time limit).
    pub fn track(self: &Arc<Self>, allowed: Duration) -> Tracked {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (Instant::now(), allowed));
        Tracked { dog: self.clone(), id }
    }

    /// How far each run in flight that is past its allowance plus [`STUCK_AFTER`] is past it.
    fn overdue_runs(&self) -> Vec<Duration> {
        let now = Instant::now();
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            // An allowance past Instant's range (a huge ceiling) is never stuck: no overflow panic here.
            .filter_map(|(start, allowed)| start.checked_add(allowed.saturating_add(STUCK_AFTER)))
            .filter_map(|due| now.checked_duration_since(due))
            .collect()
    }

    /// How far the worst run in flight is past its allowance plus [`STUCK_AFTER`], if any is.
    pub fn stuck_for(&self) -> Option<Duration> {
        self.overdue_runs().into_iter().max()
    }

    /// Runs stuck now (see [`Watchdog::stuck_for`]).
    pub fn stuck_runs(&self) -> usize {
        self.overdue_runs().len()
    }

    /// Blocking-pool work past [`BLOCKING_STUCK_AFTER`] now, and the oldest's running time.
    pub fn stuck_blocking(&self) -> (usize, Duration) {
        self.jobs.past(BLOCKING_STUCK_AFTER)
    }

    /// Run slots held past their allowance now, the longest-held first.
    pub fn stuck_slots(&self) -> Vec<crate::admission::Overdue> {
        self.slots.as_ref().map(|a| a.overdue()).unwrap_or_default()
    }

    /// Why liveness should say NOT_SERVING now, if it should: each kind of stuck work found.
    pub fn unhealthy(&self) -> Option<String> {
        let mut why = Vec::new();
        if let Some(by) = self.stuck_for() {
            why.push(format!(
                "a run is {}s past its limits: its slot is stuck",
                (by + STUCK_AFTER).as_secs()
            ));
        }
        let slots = self.stuck_slots();
        if let [oldest, ..] = &slots[..] {
            why.push(format!(
                "{} run slot(s) held past their allowance of {}s (slot {}, tenant {:?}, for {}s): requests stuck in a wait that never ends",
                slots.len(),
                oldest.allowance.as_secs(),
                oldest.index,
                oldest.tenant,
                oldest.held.as_secs()
            ));
        }
        if let (n @ 1.., oldest) = self.stuck_blocking() {
            why.push(format!(
                "{n} blocking-pool task(s) running for more than {}s (the oldest for {}s): threads the pool will not get back",
                BLOCKING_STUCK_AFTER.as_secs(),
                oldest.as_secs()
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// Warns once about each slot newly past its allowance; `warned` holds the slots warned
    /// about, each forgotten once it is not overdue any more (released).
    fn warn_slots(&self, warned: &mut HashSet<usize>) {
        let now = self.stuck_slots();
        warned.retain(|i| now.iter().any(|o| o.index == *i));
        for o in &now {
            if warned.insert(o.index) {
                tracing::warn!(
                    slot = o.index,
                    tenant = %o.tenant,
                    held_s = o.held.as_secs(),
                    allowance_s = o.allowance.as_secs(),
                    "a run slot is held past its allowance: its request is stuck"
                );
            }
        }
    }

    /// True while a run, a run slot or blocking-pool work is stuck (see [`Watchdog::unhealthy`]), as last checked.
    pub fn is_stuck(&self) -> bool {
        self.stuck.load(Ordering::Relaxed)
    }

    fn beat(&self) {
        self.beat_ms
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn since_beat(&self) -> Duration {
        self.epoch
            .elapsed()
            .saturating_sub(Duration::from_millis(self.beat_ms.load(Ordering::Relaxed)))
    }

    /// On the runtime: beats every second and keeps the liveness service's status in step
    /// with [`Watchdog::unhealthy`], counting each turn to NOT_SERVING in `tripped`. Ends
    /// when `health` is dropped.
    pub fn spawn_liveness(
        self: &Arc<Self>,
        health: tonic_health::server::HealthReporter,
        service: &'static str,
        tripped: prometheus_client::metrics::counter::Counter,
    ) {
        let dog = self.clone();
        dog.beat();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            let mut warned = HashSet::new();
            loop {
                tick.tick().await;
                dog.beat();
                dog.warn_slots(&mut warned);
                let why = dog.unhealthy();
                if why.is_some() != dog.stuck.swap(why.is_some(), Ordering::Relaxed) {
                    match why {
                        Some(why) => {
                            tracing::error!("{why}; liveness says NOT_SERVING");
                            tripped.inc();
                            health.set_service_status(service, ServingStatus::NotServing).await;
                        }
                        None => {
                            tracing::warn!("nothing is stuck any more; liveness says SERVING");
                            health.set_service_status(service, ServingStatus::Serving).await;
                        }
                    }
                }
            }
        });
    }

    /// Starts the OS thread that ends the process when the runtime stops
    /// beating for `stall` (zero: never) or a SIGTERM/SIGINT is not honoured
    /// within `grace`. `last_words` is called with the reason before exiting.
    pub fn guard_process(
        self: &Arc<Self>,
        stall: Duration,
        grace: Duration,
        last_words: fn(&str),
    ) -> std::io::Result<()> {
        let term = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(sig, term.clone())?;
        }
        let dog = self.clone();
        std::thread::Builder::new()
            .name("sandpool-watchdog".into())
            .spawn(move || {
                let mut asked_to_stop: Option<Instant> = None;
                loop {
                    std::thread::sleep(TICK);
                    if asked_to_stop.is_none() && term.load(Ordering::Relaxed) {
                        asked_to_stop = Some(Instant::now());
                    }
                    let why = match asked_to_stop {
                        Some(t) if t.elapsed() > grace => Some(format!(
                            "asked to stop {}s ago and still running (drain timeout plus margin): exiting",
                            t.elapsed().as_secs()
                        )),
                        _ if !stall.is_zero() && dog.since_beat() > stall => Some(format!(
                            "the async runtime has not run for {}s (wedged): exiting so that the executor is restarted",
                            dog.since_beat().as_secs()
                        )),
                        _ => None,
                    };
                    if let Some(why) = why {
                        tracing::error!("{why}");
                        last_words(&why);
                        std::process::exit(70);
                    }
                }
            })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_stuck_only_well_past_its_allowance_and_forgotten_when_it_ends() {
        let dog = Watchdog::new();
        let fine = dog.track(Duration::from_secs(3600));
        assert_eq!(dog.stuck_for(), None);
        // Pretend a run started long ago with a 1 s allowance.
        let old = dog.track(Duration::from_secs(1));
        if let Some(start) = Instant::now().checked_sub(STUCK_AFTER + Duration::from_secs(5)) {
            dog.runs.lock().unwrap().get_mut(&old.id).unwrap().0 = start;
            assert!(dog.stuck_for().is_some_and(|d| d >= Duration::from_secs(3)));
        }
        drop(old);
        assert_eq!(dog.stuck_for(), None);
        drop(fine);
        assert!(dog.runs.lock().unwrap().is_empty());
        // A ceiling set to "forever" is an allowance, not a panic in the liveness task.
        let _forever = dog.track(Duration::MAX);
        assert_eq!(dog.stuck_for(), None);
    }

    #[tokio::test]
    async fn liveness_turns_not_serving_while_a_run_is_stuck_and_back() {
        let dog = Watchdog::new();
        let (health, _svc) = tonic_health::server::health_reporter();
        health.set_service_status("liveness", ServingStatus::Serving).await;
        dog.spawn_liveness(health, "liveness", Default::default());
        let stuck = dog.track(Duration::ZERO);
        let start = Instant::now()
            .checked_sub(STUCK_AFTER + Duration::from_secs(1))
            .expect("uptime");
        dog.runs.lock().unwrap().get_mut(&stuck.id).unwrap().0 = start;
        let t = Instant::now();
        while !dog.is_stuck() {
            assert!(t.elapsed() < Duration::from_secs(5), "noticed within a few ticks");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(stuck);
        while dog.is_stuck() {
            assert!(t.elapsed() < Duration::from_secs(10), "cleared within a few ticks");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(dog.since_beat() < Duration::from_secs(3), "the runtime beats");
    }

    /// Blocking-pool work far past its bound turns liveness NOT_SERVING (counted), and
    /// SERVING again once it ends; work within its bound never does.
    #[tokio::test]
    async fn blocking_work_far_past_its_bound_turns_liveness_not_serving_and_back() {
        let jobs: &'static Jobs = Box::leak(Box::default());
        let dog = Arc::new(Watchdog {
            jobs,
            ..Watchdog::default()
        });
        let (health, _svc) = tonic_health::server::health_reporter();
        health.set_service_status("liveness", ServingStatus::Serving).await;
        let tripped = prometheus_client::metrics::counter::Counter::<u64>::default();
        dog.spawn_liveness(health, "liveness", tripped.clone());
        let fresh = jobs.start();
        assert_eq!(dog.stuck_blocking().0, 0);
        assert_eq!(dog.unhealthy(), None);
        let old = jobs.start();
        let Some(long_ago) = Instant::now().checked_sub(BLOCKING_STUCK_AFTER + Duration::from_secs(5)) else {
            return; // a machine up for less than that cannot have work this old
        };
        jobs.lock().insert(old.id, long_ago);
        assert_eq!(dog.stuck_blocking().0, 1);
        assert!(dog.unhealthy().is_some_and(|w| w.contains("blocking-pool")));
        let t = Instant::now();
        while !dog.is_stuck() {
            assert!(t.elapsed() < Duration::from_secs(10), "noticed within a few ticks");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(tripped.get(), 1, "counted");
        drop(old);
        while dog.is_stuck() {
            assert!(t.elapsed() < Duration::from_secs(20), "cleared within a few ticks");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        drop(fresh);
        assert_eq!(jobs.past(Duration::ZERO).0, 0, "forgotten when they end");
    }

    /// The default ceilings give a slot 6.5 minutes: far more than any request holds one.
    #[test]
    fn the_slot_allowance_covers_a_first_build_a_compile_and_a_run_at_the_ceilings() {
        let l = |s| crate::limits::Limits {
            wall: Duration::from_secs(s),
            ..crate::limits::MIN
        };
        let policy = LimitPolicy {
            run_defaults: l(10),
            compile_defaults: l(30),
            max: l(60),
        };
        assert_eq!(slot_allowance(&policy), Duration::from_secs(5 * 60 + 30 + 60));
        let forever = LimitPolicy {
            max: l(u64::MAX),
            ..policy
        };
        assert_eq!(slot_allowance(&forever), Duration::MAX, "saturates, never panics");
    }

    /// A watchdog of its own blocking work (none) and `slots`, its liveness task running.
    async fn slot_dog(slots: &Arc<Admission>) -> (Arc<Watchdog>, prometheus_client::metrics::counter::Counter<u64>) {
        let dog = Arc::new(Watchdog {
            jobs: Box::leak(Box::default()),
            slots: Some(slots.clone()),
            ..Watchdog::default()
        });
        let (health, _svc) = tonic_health::server::health_reporter();
        health.set_service_status("liveness", ServingStatus::Serving).await;
        let tripped = prometheus_client::metrics::counter::Counter::<u64>::default();
        dog.spawn_liveness(health, "liveness", tripped.clone());
        (dog, tripped)
    }

    /// A slot held past its allowance (a request stuck in a wait that never ends) turns
    /// liveness NOT_SERVING, counted, with the slot's tenant in the reason; SERVING again
    /// once it is released.
    #[tokio::test]
    async fn a_slot_held_past_its_allowance_turns_liveness_not_serving_and_back() {
        let slots = Admission::new(2, 4);
        slots.set_allowance(Duration::from_millis(200));
        let (dog, tripped) = slot_dog(&slots).await;
        let ticket = crate::admission::Ticket {
            tenant: Arc::new(crate::tenants::Tenant {
                name: "stuck-tenant".into(),
                ..(*crate::tenants::Tenant::anonymous()).clone()
            }),
            priority: crate::tenants::Priority::Normal,
        };
        let held = slots
            .acquire_as(&ticket, None, crate::admission::Admit::New)
            .await
            .expect("a free slot");
        let t = Instant::now();
        while !dog.is_stuck() {
            assert!(t.elapsed() < Duration::from_secs(10), "noticed within a few ticks");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(tripped.get(), 1, "counted");
        let stuck = dog.stuck_slots();
        assert_eq!(stuck.len(), 1, "{stuck:?}");
        assert_eq!(&*stuck[0].tenant, "stuck-tenant");
        assert!(stuck[0].held > Duration::from_millis(200));
        let why = dog.unhealthy().expect("a reason");
        assert!(why.contains("run slot") && why.contains("stuck-tenant"), "{why}");
        drop(held);
        assert!(dog.stuck_slots().is_empty(), "forgotten when released");
        while dog.is_stuck() {
            assert!(t.elapsed() < Duration::from_secs(20), "cleared within a few ticks");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(dog.unhealthy(), None);
    }

    /// Slots released within their allowance never turn liveness NOT_SERVING, nor do slots of
    /// an executor that set no allowance.
    #[tokio::test]
    async fn slots_released_in_time_raise_no_alarm() {
        let slots = Admission::new(2, 4);
        // Unset: "forever", and no overflow in the check.
        let (dog, tripped) = slot_dog(&slots).await;
        let unset = slots.acquire(None).await.expect("a free slot");
        slots.set_allowance(Duration::from_secs(60));
        let in_time = slots.acquire(None).await.expect("a free slot");
        // Several ticks while both are held, well inside their allowance.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(dog.stuck_slots().is_empty());
        assert!(!dog.is_stuck());
        drop(in_time);
        drop(unset);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!dog.is_stuck());
        assert_eq!(tripped.get(), 0, "never tripped");
    }

    /// The engine's watchdog watches the engine's own slots, and the metrics count them.
    #[tokio::test]
    async fn the_engine_watches_its_slots_and_counts_them_in_the_metrics() {
        use crate::fake_runner::{FakeRunner, Reply};
        let (runner, _calls) = FakeRunner::new(2, |_| Reply::ok(b"fake 1".to_vec()));
        let engine = crate::fake_runner::engine(runner).await;
        let held = engine.admission().acquire(None).await.expect("a free slot");
        assert!(
            engine.watchdog().stuck_slots().is_empty(),
            "the ceilings' allowance is minutes"
        );
        assert!(engine.metrics_text().contains("sandpool_watchdog_stuck_slots 0"));
        drop(held);
        engine.admission().set_allowance(Duration::from_millis(20));
        let _held = engine.admission().acquire(None).await.expect("a free slot");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(engine.watchdog().stuck_slots().len(), 1);
        assert!(engine.metrics_text().contains("sandpool_watchdog_stuck_slots 1"));
    }
}
