//! The executors a gateway sends to: a set swapped whole on each change, each backend
//! with its outstanding requests and whether it recently failed to connect.

use crate::metrics::Metrics;
use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// One executor.
#[derive(Debug)]
pub struct Backend {
    /// The executor's name: its pod name (what session ids name).
    pub name: String,
    /// `host:port` of its HTTP API.
    pub addr: String,
    outstanding: AtomicU64,
    down_until: Mutex<Option<Instant>>,
    /// Which update of the set first held it: a rollout's new pods have the highest.
    generation: u64,
}

impl Backend {
    pub fn new(name: impl Into<String>, addr: impl Into<String>) -> Self {
        Backend {
            name: name.into(),
            addr: addr.into(),
            outstanding: AtomicU64::new(0),
            down_until: Mutex::new(None),
            generation: 0,
        }
    }

    fn discovered_in(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }

    /// Requests sent to it whose responses have not ended.
    pub fn outstanding(&self) -> u64 {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// Whether it failed to connect less than the down time ago.
    pub fn is_down(&self, now: Instant) -> bool {
        self.down_until
            .lock()
            .map(|d| d.is_some_and(|t| now < t))
            .unwrap_or(false)
    }

    /// Skipped by stateless requests until `for_` has passed.
    pub fn mark_down(&self, for_: Duration) {
        if let Ok(mut d) = self.down_until.lock() {
            *d = Some(Instant::now() + for_);
        }
    }

    /// Connected fine: no longer skipped.
    pub fn mark_up(&self) {
        if let Ok(mut d) = self.down_until.lock() {
            *d = None;
        }
    }
}

/// Counts a request as outstanding on its backend until dropped (when its response
/// body has ended or been abandoned).
#[derive(Debug)]
pub struct Outstanding {
    backend: Arc<Backend>,
    metrics: Arc<Metrics>,
}

impl Outstanding {
    pub fn new(backend: Arc<Backend>, metrics: Arc<Metrics>) -> Self {
        let n = backend.outstanding.fetch_add(1, Ordering::Relaxed) + 1;
        metrics.set_outstanding(&backend.name, n);
        Outstanding { backend, metrics }
    }
}

impl Drop for Outstanding {
    fn drop(&mut self) {
        let n = self
            .backend
            .outstanding
            .fetch_sub(1, Ordering::Relaxed)
            .saturating_sub(1);
        self.metrics.set_outstanding(&self.backend.name, n);
    }
}

/// One version of the backend set.
#[derive(Debug, Default)]
pub struct Set {
    pub list: Vec<Arc<Backend>>,
    by_name: HashMap<String, Arc<Backend>>,
    /// Executors whose pods are terminating: no new work goes there, but the sessions they
    /// still hold do, until their drain has paused them into the store (docs/gateway.md).
    draining: HashMap<String, Arc<Backend>>,
}

impl Set {
    /// A live backend by name.
    pub fn get(&self, name: &str) -> Option<&Arc<Backend>> {
        self.by_name.get(name)
    }

    /// The backend that may still hold a session of executor `name`: live or draining.
    pub fn holder(&self, name: &str) -> Option<&Arc<Backend>> {
        self.by_name.get(name).or_else(|| self.draining.get(name))
    }

    /// How many live backends are not in `tried`: where a refused request may go next.
    pub fn untried(&self, tried: &[Arc<Backend>]) -> usize {
        self.list
            .iter()
            .filter(|b| !tried.iter().any(|t| Arc::ptr_eq(t, b)))
            .count()
    }
}

/// The current backend set, shared by every request; replaced whole on each change.
#[derive(Debug)]
pub struct Backends {
    current: RwLock<Arc<Set>>,
    /// Where the next tie-break starts, so equal backends take turns.
    turn: AtomicUsize,
    /// Counts the set's updates; a backend first seen in one carries its number.
    generation: AtomicU64,
    metrics: Arc<Metrics>,
}

impl Backends {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Backends {
            current: RwLock::new(Arc::new(Set::default())),
            turn: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            metrics,
        }
    }

    /// The set now (requests keep the version they started with).
    pub fn snapshot(&self) -> Arc<Set> {
        match self.current.read() {
            Ok(s) => s.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Replaces the set with `backends` (name, address). A backend whose name and address
    /// are unchanged keeps its state (outstanding count, down mark), so counts stay true
    /// across updates. Later duplicates of a name are ignored.
    pub fn replace(&self, backends: impl IntoIterator<Item = (String, String)>) {
        self.replace_with_draining(backends, std::iter::empty());
    }

    /// [`Backends::replace`], with the executors whose pods are terminating (`draining`):
    /// only the sessions they hold are sent there (see [`Set::holder`]).
    pub fn replace_with_draining(
        &self,
        backends: impl IntoIterator<Item = (String, String)>,
        draining: impl IntoIterator<Item = (String, String)>,
    ) {
        let old = self.snapshot();
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let mut set = Set::default();
        let kept = |name: &str, addr: &str| {
            old.holder(name)
                .filter(|b| b.addr == addr)
                .cloned()
                .unwrap_or_else(|| Arc::new(Backend::new(name, addr).discovered_in(generation)))
        };
        for (name, addr) in backends {
            if set.by_name.contains_key(&name) {
                continue;
            }
            let b = kept(&name, &addr);
            set.list.push(b.clone());
            set.by_name.insert(name, b);
        }
        for (name, addr) in draining {
            if set.by_name.contains_key(&name) || set.draining.contains_key(&name) {
                continue;
            }
            let b = kept(&name, &addr);
            set.draining.insert(name, b);
        }
        for name in old
            .by_name
            .keys()
            .chain(old.draining.keys())
            .filter(|n| set.holder(n).is_none())
        {
            self.metrics.forget_backend(name);
        }
        for b in &set.list {
            self.metrics.set_outstanding(&b.name, b.outstanding());
        }
        self.metrics.backends.set(set.list.len() as i64);
        let names: Vec<&str> = set.list.iter().map(|b| b.name.as_str()).collect();
        let draining: Vec<&str> = set.draining.keys().map(String::as_str).collect();
        tracing::info!(backends = ?names, ?draining, "backend set updated");
        let set = Arc::new(set);
        match self.current.write() {
            Ok(mut c) => *c = set,
            Err(poisoned) => *poisoned.into_inner() = set,
        }
    }

    /// The backend of `set` a stateless request goes to next: fewest outstanding among
    /// those not in `tried`, skipping ones marked down unless every other is too; ties
    /// taken in turn.
    pub fn choose(&self, set: &Set, tried: &[Arc<Backend>]) -> Option<Arc<Backend>> {
        let now = Instant::now();
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        choose_from(&set.list, tried, start, false, |b| b.is_down(now))
    }

    /// The backend a session whose executor is gone moves to: the most recently discovered
    /// among those not in `tried` (in a rolling update, a new pod, which is not drained next,
    /// so the session moves once), then fewest outstanding, down ones last.
    pub fn choose_for_moved(&self, set: &Set, tried: &[Arc<Backend>]) -> Option<Arc<Backend>> {
        let now = Instant::now();
        let start = self.turn.fetch_add(1, Ordering::Relaxed);
        choose_from(&set.list, tried, start, true, |b| b.is_down(now))
    }
}

/// [`Backends::choose`]'s rule over `list` (with `newest_first`, [`Backends::choose_for_moved`]'s),
/// ties broken from `start` on.
fn choose_from(
    list: &[Arc<Backend>],
    tried: &[Arc<Backend>],
    start: usize,
    newest_first: bool,
    is_down: impl Fn(&Backend) -> bool,
) -> Option<Arc<Backend>> {
    let n = list.len();
    // Down, generation (newest first), outstanding: the smallest wins.
    type Key = (bool, Reverse<u64>, u64);
    let mut best: Option<(Key, &Arc<Backend>)> = None;
    for i in 0..n {
        let b = &list[(start + i) % n];
        if tried.iter().any(|t| Arc::ptr_eq(t, b)) {
            continue;
        }
        // Up before down, then (newest_first) newer, then fewer outstanding; the first seen
        // wins ties.
        let generation = if newest_first { b.generation } else { 0 };
        let key = (is_down(b), Reverse(generation), b.outstanding());
        if best.is_none_or(|(k, _)| key < k) {
            best = Some((key, b));
        }
    }
    best.map(|(_, b)| b.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> Vec<Arc<Backend>> {
        names
            .iter()
            .map(|n| Arc::new(Backend::new(*n, "127.0.0.1:1")))
            .collect()
    }

    fn busy(b: &Backend, n: u64) {
        b.outstanding.store(n, Ordering::Relaxed);
    }

    #[test]
    fn fewest_outstanding_wins() {
        let l = list(&["a", "b", "c"]);
        busy(&l[0], 3);
        busy(&l[1], 1);
        busy(&l[2], 2);
        for start in 0..3 {
            assert_eq!(
                choose_from(&l, &[], start, false, |_| false).map(|b| b.name.clone()),
                Some("b".into())
            );
        }
    }

    #[test]
    fn ties_take_turns() {
        let l = list(&["a", "b", "c"]);
        let picks: Vec<String> = (0..6)
            .filter_map(|s| choose_from(&l, &[], s, false, |_| false))
            .map(|b| b.name.clone())
            .collect();
        assert_eq!(picks, ["a", "b", "c", "a", "b", "c"]);
    }

    #[test]
    fn tried_backends_are_not_chosen_again() {
        let l = list(&["a", "b"]);
        busy(&l[1], 5);
        let got = choose_from(&l, &[l[0].clone()], 0, false, |_| false);
        assert_eq!(got.map(|b| b.name.clone()), Some("b".into()));
        assert!(choose_from(&l, &l, 0, false, |_| false).is_none());
    }

    #[test]
    fn down_backends_only_when_nothing_else() {
        let l = list(&["a", "b"]);
        busy(&l[1], 9);
        let down = |b: &Backend| b.name == "a";
        assert_eq!(
            choose_from(&l, &[], 0, false, down).map(|b| b.name.clone()),
            Some("b".into())
        );
        let all_down = |_: &Backend| true;
        assert_eq!(
            choose_from(&l, &[], 0, false, all_down).map(|b| b.name.clone()),
            Some("a".into())
        );
    }

    #[test]
    fn replacing_keeps_the_state_of_unchanged_backends() {
        let m = Arc::new(Metrics::new());
        let bs = Backends::new(m.clone());
        bs.replace([("a".into(), "h:1".into()), ("b".into(), "h:2".into())]);
        let a = bs.snapshot().get("a").cloned().expect("a");
        let _out = Outstanding::new(a.clone(), m.clone());
        bs.replace([
            ("a".into(), "h:1".into()),
            ("b".into(), "h:3".into()),
            ("a".into(), "h:9".into()),
        ]);
        let s = bs.snapshot();
        assert!(Arc::ptr_eq(s.get("a").expect("a"), &a));
        assert_eq!(s.get("a").map(|b| b.outstanding()), Some(1));
        assert_eq!(s.get("b").map(|b| b.addr.as_str()), Some("h:3"));
        assert_eq!(s.list.len(), 2);
    }

    #[test]
    fn a_moved_session_goes_to_the_newest_backend() {
        // A rolling update with surge: a (old, draining next), c (new) after b (old) went.
        let m = Arc::new(Metrics::new());
        let bs = Backends::new(m);
        bs.replace([("a".into(), "h:1".into()), ("b".into(), "h:2".into())]);
        bs.replace([
            ("a".into(), "h:1".into()),
            ("b".into(), "h:2".into()),
            ("c".into(), "h:3".into()),
        ]);
        let s = bs.snapshot();
        let (a, b, c) = (s.get("a").cloned(), s.get("b").cloned(), s.get("c").cloned());
        let (a, b, c) = (a.expect("a"), b.expect("b"), c.expect("c"));
        busy(&c, 5);
        let name = |x: Option<Arc<Backend>>| x.map(|b| b.name.clone());
        for _ in 0..3 {
            assert_eq!(
                name(bs.choose_for_moved(&s, std::slice::from_ref(&b))),
                Some("c".into())
            );
            // Stateless requests still go to the least busy.
            assert_eq!(name(bs.choose(&s, std::slice::from_ref(&b))), Some("a".into()));
        }
        // When the newest refused, the older ones, fewest outstanding first.
        busy(&a, 2);
        assert_eq!(
            name(bs.choose_for_moved(&s, std::slice::from_ref(&c))),
            Some("b".into())
        );
        // Down ones last, however new.
        c.mark_down(Duration::from_secs(60));
        assert_eq!(
            name(bs.choose_for_moved(&s, std::slice::from_ref(&b))),
            Some("a".into())
        );
        // Backends first seen together are equals: the least busy.
        let bs = Backends::new(Arc::new(Metrics::new()));
        bs.replace([("x".into(), "h:1".into()), ("y".into(), "h:2".into())]);
        let s = bs.snapshot();
        busy(s.get("x").expect("x"), 3);
        assert_eq!(name(bs.choose_for_moved(&s, &[])), Some("y".into()));
    }

    #[test]
    fn draining_backends_hold_their_sessions_and_take_nothing_new() {
        let m = Arc::new(Metrics::new());
        let bs = Backends::new(m.clone());
        bs.replace([("a".into(), "h:1".into()), ("b".into(), "h:2".into())]);
        let a = bs.snapshot().get("a").cloned().expect("a");
        let _out = Outstanding::new(a.clone(), m);
        // a's pod terminates: its endpoint turns terminating.
        bs.replace_with_draining([("b".into(), "h:2".into())], [("a".into(), "h:1".into())]);
        let s = bs.snapshot();
        assert!(s.get("a").is_none(), "not live");
        let held = s.holder("a").expect("still reachable for its sessions");
        assert!(
            Arc::ptr_eq(held, &a) && held.outstanding() == 1,
            "same backend, same count"
        );
        assert_eq!(s.list.len(), 1);
        for _ in 0..3 {
            let got = bs.choose(&s, &[]).map(|b| b.name.clone());
            assert_eq!(got.as_deref(), Some("b"));
            let got = bs.choose_for_moved(&s, &[]).map(|b| b.name.clone());
            assert_eq!(got.as_deref(), Some("b"));
        }
        assert_eq!(s.untried(std::slice::from_ref(&a)), 1, "a tried, b left");
        // Gone for good.
        bs.replace([("b".into(), "h:2".into())]);
        assert!(bs.snapshot().holder("a").is_none());
    }

    #[test]
    fn marks_down_for_a_while() {
        let b = Backend::new("a", "h:1");
        assert!(!b.is_down(Instant::now()));
        b.mark_down(Duration::from_secs(60));
        assert!(b.is_down(Instant::now()));
        assert!(!b.is_down(Instant::now() + Duration::from_secs(61)));
        b.mark_up();
        assert!(!b.is_down(Instant::now()));
    }
}
