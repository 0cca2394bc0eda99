//! The executor watches itself: a run that outlives its limits by far means a
//! stuck slot, and an async runtime that stops running means nothing answers.
//!
//! - [`Watchdog::track`] registers each run with the time it may take; the
//!   liveness health service (`liveness`, what the kubelet probes) turns
//!   NOT_SERVING while any run is [`STUCK_AFTER`] past its allowance, so the
//!   pod is restarted instead of serving timeouts with SERVING health.
//! - [`Watchdog::guard_process`] starts an OS thread, outside the runtime it
//!   guards: when the runtime's heartbeat stops for `stall`, or a SIGTERM is
//!   not honoured within `grace`, it logs why, leaves a termination message
//!   and exits. A wedged runtime cannot answer any probe; exiting is the one
//!   answer left, and the next start reclaims the slots.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tonic_health::ServingStatus;

/// How far past its allowance a run counts as stuck.
pub const STUCK_AFTER: Duration = Duration::from_secs(60);

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
}

impl Default for Watchdog {
    fn default() -> Self {
        Watchdog {
            epoch: Instant::now(),
            beat_ms: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
            runs: Mutex::new(HashMap::new()),
            stuck: AtomicBool::new(false),
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

    /// Registers a run that should end within `allowed` (its wall-time limit).
    pub fn track(self: &Arc<Self>, allowed: Duration) -> Tracked {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, (Instant::now(), allowed));
        Tracked { dog: self.clone(), id }
    }

    /// How far the worst run in flight is past its allowance plus [`STUCK_AFTER`], if any is.
    pub fn stuck_for(&self) -> Option<Duration> {
        let now = Instant::now();
        self.runs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            // An allowance past Instant's range (a huge ceiling) is never stuck: no overflow panic here.
            .filter_map(|(start, allowed)| start.checked_add(allowed.saturating_add(STUCK_AFTER)))
            .filter_map(|due| now.checked_duration_since(due))
            .max()
    }

    /// True while a run is stuck (see [`Watchdog::stuck_for`]), as last checked.
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

    /// On the runtime: beats every second and keeps the liveness service's
    /// status in step with [`Watchdog::stuck_for`]. Ends when `health` is dropped.
    pub fn spawn_liveness(self: &Arc<Self>, health: tonic_health::server::HealthReporter, service: &'static str) {
        let dog = self.clone();
        dog.beat();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            loop {
                tick.tick().await;
                dog.beat();
                let stuck = dog.stuck_for();
                if stuck.is_some() != dog.stuck.swap(stuck.is_some(), Ordering::Relaxed) {
                    match stuck {
                        Some(by) => {
                            tracing::error!(
                                past_limit_s = (by + STUCK_AFTER).as_secs(),
                                "a run is far past its limits: its slot is stuck; liveness says NOT_SERVING"
                            );
                            health.set_service_status(service, ServingStatus::NotServing).await;
                        }
                        None => {
                            tracing::warn!("no run is stuck any more; liveness says SERVING");
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
        dog.spawn_liveness(health, "liveness");
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
}
