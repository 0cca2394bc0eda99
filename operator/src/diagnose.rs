//! Why a pool's executors are not running, said the way a person fixing it needs to read it.
//!
//! A pure mapping from the pool's Deployment (whose `ReplicaFailure` condition the
//! Deployment controller copies from the ReplicaSet: a `FailedCreate` such as a Pod Security
//! refusal, with the ReplicaSet's message), its pods (container states, restart counts,
//! termination messages, the scheduler's verdict) and the kubelet's `Unhealthy` Events about
//! them (a probe's answer is written nowhere else) to the one [`Problem`] the pool's
//! conditions name, with the others it found summarised in the message. No problem: `None`,
//! and the conditions go back to their plain reasons.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The ReplicaSet cannot create pods (admission, quota): the Deployment's `ReplicaFailure`.
pub const REPLICA_FAILURE: &str = "ReplicaFailure";
/// The kubelet cannot pull the image, or will not (`imagePullPolicy: Never`), or cannot
/// parse its name.
pub const IMAGE_PULL_REASONS: [&str; 4] = [
    "InvalidImageName",
    "ErrImageNeverPull",
    "ErrImagePull",
    "ImagePullBackOff",
];
/// The executor was killed by the kernel's OOM killer (its container's memory limit).
pub const OOM_KILLED: &str = "OOMKilled";
/// The executor keeps exiting and the kubelet waits longer before each restart.
pub const CRASH_LOOP: &str = "CrashLoopBackOff";
/// The executor exited for the first time (not yet restarted: after that it is a crash loop).
pub const CONTAINER_EXITED: &str = "ContainerExited";
/// The kubelet evicted a pod (node pressure).
pub const EVICTED: &str = "Evicted";
/// No node can take a pod (the scheduler's `PodScheduled=False` message says why).
pub const UNSCHEDULABLE: &str = "Unschedulable";
/// The executor runs and started, but its readiness probe keeps failing (the kubelet's
/// Event reason, whose message is the probe's answer).
pub const UNHEALTHY: &str = "Unhealthy";
/// The kubelet cannot mount a pod's volumes (a missing Secret or ConfigMap it names, a
/// claim it cannot attach): its Event reason, whose message names the volume and why.
pub const FAILED_MOUNT: &str = "FailedMount";
/// The Deployment gave up waiting for its rollout (`progressDeadlineSeconds`).
pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";

/// Waiting reasons of a container that is on its way, not stuck.
const NORMAL_WAITING: [&str; 2] = ["ContainerCreating", "PodInitializing"];
/// How long a readiness probe must have kept failing (one Event's first to last time, which
/// the kubelet counts up while the answer stays the same) before it is a problem: the probe
/// runs every 5 s, and an executor may answer NOT_SERVING for a moment after it started.
pub const UNHEALTHY_AFTER_SECONDS: i64 = 30;
/// The same, as a count of failures, for Events without both times.
const UNHEALTHY_AFTER_FAILURES: i32 = 6;
/// A probe Event older than this no longer describes the pod.
const PROBE_EVENT_FRESH_SECONDS: i64 = 120;
/// Longest quoted line (an executor error, a scheduler verdict).
const MAX_QUOTE_CHARS: usize = 600;
/// Longest whole message; the API server allows 32768 bytes, people read far less.
pub const MAX_MESSAGE_CHARS: usize = 2000;

/// What the reconcile read about a pool's pods: the pods its selector matches, and the
/// `Unhealthy` Events in their namespace (read only when [`wants_probe_events`]).
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The pool's pods (any ReplicaSet's).
    pub pods: Vec<Pod>,
    /// core/v1 Events with reason `Unhealthy` (probe failures) or `FailedMount` (read only
    /// when [`wants_mount_events`]), about any object.
    pub probe_events: Vec<Event>,
}

/// Whether a pod's state calls for the kubelet's probe Events: a container that runs and
/// started but is not ready (readiness failing?), or that was restarted after exiting 0
/// (the executor exits 0 only when stopped: by the kubelet, for a failing liveness or
/// startup probe).
pub fn wants_probe_events(pods: &[Pod]) -> bool {
    pods.iter()
        .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
        .flatten()
        .any(|c| {
            let running = c.state.as_ref().is_some_and(|s| s.running.is_some());
            let stopped_cleanly = c
                .last_state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .is_some_and(|t| t.exit_code == 0);
            !c.ready && ((running && c.started == Some(true)) || (c.restart_count > 0 && stopped_cleanly))
        })
}

/// Whether a pod is scheduled but its container not created yet (`ContainerCreating`, or no
/// container status at all): where a volume the kubelet cannot mount holds it, which only
/// the kubelet's `FailedMount` Events say.
pub fn wants_mount_events(pods: &[Pod]) -> bool {
    pods.iter().any(creating)
}

fn creating(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    let scheduled = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.status == "True");
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    let waiting_to_create = containers.is_empty()
        || containers.iter().all(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .is_some_and(|w| w.reason.as_deref() == Some("ContainerCreating"))
        });
    pod.metadata.deletion_timestamp.is_none()
        && status.phase.as_deref() == Some("Pending")
        && scheduled
        && waiting_to_create
}

/// The newest fresh `FailedMount` Event about `pod`, for a pod still being created.
fn failed_mount(pod: &Pod, events: &[Event], now: &Time) -> Option<Finding> {
    if !creating(pod) {
        return None;
    }
    let name = pod.metadata.name.as_deref()?;
    let now = now.0.as_second();
    let (_, message) = events
        .iter()
        .filter(|e| {
            e.reason.as_deref() == Some(FAILED_MOUNT)
                && e.involved_object.kind.as_deref() == Some("Pod")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .filter_map(|e| {
            let last = e
                .last_timestamp
                .as_ref()
                .map(|t| t.0.as_second())
                .or_else(|| e.event_time.as_ref().map(|t| t.0.as_second()))?;
            (now.saturating_sub(last) <= PROBE_EVENT_FRESH_SECONDS)
                .then(|| (last, e.message.as_deref().unwrap_or_default()))
        })
        .max_by_key(|(last, _)| *last)?;
    Some(finding(
        FAILED_MOUNT,
        format!("pod {name} cannot mount its volumes: {}", clean(message)),
        0,
    ))
}

/// What the pool's conditions say is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Condition reason (CamelCase, what `kubectl get sbp` shows in REASON).
    pub reason: String,
    /// Quotes the cause: the pod, the container's last error line, the scheduler's message.
    pub message: String,
}

/// One problem found on one pod (or on the Deployment), before choosing which to report.
#[derive(Debug, Clone)]
struct Finding {
    /// Lower is reported first (see [`rank`]).
    rank: u8,
    reason: String,
    message: String,
    restarts: i32,
}

/// Precedence when several problems apply: the one nearest the root cause first. A
/// ReplicaSet that cannot create pods, an image that cannot be had, a container killed for
/// memory or crashing, a container that cannot be set up, a pod evicted, a pod no node can
/// take, a probe failing, and last the Deployment's deadline, which only says that one of
/// the others has lasted too long.
fn rank(reason: &str) -> u8 {
    match reason {
        REPLICA_FAILURE => 0,
        r if IMAGE_PULL_REASONS.contains(&r) => 1,
        OOM_KILLED => 2,
        CRASH_LOOP => 3,
        CONTAINER_EXITED => 5,
        EVICTED => 6,
        UNSCHEDULABLE => 7,
        UNHEALTHY => 8,
        PROGRESS_DEADLINE_EXCEEDED => 9,
        // Any other waiting reason: CreateContainerConfigError, RunContainerError, ...
        _ => 4,
    }
}

/// The problem to report for a pool, from its live Deployment and the pods its selector
/// matches (any ReplicaSet's), at `now`. `None` when nothing is wrong that a pod or the
/// Deployment says (pods still starting are not a problem).
pub fn diagnose(deployment: &Deployment, observed: &Observed, now: &Time) -> Option<Problem> {
    let mut findings = deployment_findings(deployment);
    for pod in &observed.pods {
        // A pod being deleted (a rollout's old pod, a scale-down) is on its way out.
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let probes = ProbeFailures::of(pod, &observed.probe_events, now);
        findings.extend(pod_finding(pod, &probes).or_else(|| failed_mount(pod, &observed.probe_events, now)));
    }
    choose(findings)
}

/// The kubelet's recent probe failures for one pod: `Unhealthy` Events about it, newest
/// first, with how long each has been going on.
struct ProbeFailures<'a> {
    /// (message, seconds from the first failure to the last, count)
    events: Vec<(&'a str, i64, i32)>,
}

impl<'a> ProbeFailures<'a> {
    fn of(pod: &Pod, events: &'a [Event], now: &Time) -> Self {
        let name = pod.metadata.name.as_deref();
        let now = now.0.as_second();
        let mut found: Vec<(i64, &str, i64, i32)> = events
            .iter()
            .filter(|e| {
                e.reason.as_deref() == Some(UNHEALTHY)
                    && e.involved_object.kind.as_deref() == Some("Pod")
                    && e.involved_object.name.as_deref() == name
            })
            .filter_map(|e| {
                let last = e
                    .last_timestamp
                    .as_ref()
                    .map(|t| t.0.as_second())
                    .or_else(|| e.event_time.as_ref().map(|t| t.0.as_second()))?;
                let first = e.first_timestamp.as_ref().map_or(last, |t| t.0.as_second());
                let fresh = now.saturating_sub(last) <= PROBE_EVENT_FRESH_SECONDS;
                fresh.then(|| {
                    (
                        last,
                        e.message.as_deref().unwrap_or_default(),
                        last.saturating_sub(first),
                        e.count.unwrap_or(1),
                    )
                })
            })
            .collect();
        found.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        Self {
            events: found.into_iter().map(|(_, m, span, n)| (m, span, n)).collect(),
        }
    }

    /// The newest failure of the readiness probe that has gone on long enough to matter.
    fn readiness(&self) -> Option<&'a str> {
        self.events
            .iter()
            .find(|(m, span, n)| {
                m.starts_with("Readiness probe") && (*span >= UNHEALTHY_AFTER_SECONDS || *n >= UNHEALTHY_AFTER_FAILURES)
            })
            .map(|(m, _, _)| *m)
    }

    /// The newest liveness or startup probe failure (why the kubelet stops a container).
    fn restart_cause(&self) -> Option<&'a str> {
        self.events
            .iter()
            .find(|(m, _, _)| m.starts_with("Liveness probe") || m.starts_with("Startup probe"))
            .map(|(m, _, _)| *m)
    }
}

fn deployment_findings(deployment: &Deployment) -> Vec<Finding> {
    let conditions = deployment
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let mut findings = Vec::new();
    for c in conditions {
        let message = c.message.as_deref().map(clean).unwrap_or_default();
        if c.type_ == "ReplicaFailure" && c.status == "True" {
            let why = c.reason.as_deref().unwrap_or("FailedCreate");
            findings.push(Finding {
                rank: rank(REPLICA_FAILURE),
                reason: REPLICA_FAILURE.to_owned(),
                message: format!("the ReplicaSet cannot create executor pods ({why}): {message}"),
                restarts: 0,
            });
        }
        if c.type_ == "Progressing" && c.status == "False" && c.reason.as_deref() == Some(PROGRESS_DEADLINE_EXCEEDED) {
            findings.push(Finding {
                rank: rank(PROGRESS_DEADLINE_EXCEEDED),
                reason: PROGRESS_DEADLINE_EXCEEDED.to_owned(),
                message: format!("the rollout made no progress within its deadline: {message}"),
                restarts: 0,
            });
        }
    }
    findings
}

/// The worst problem of one pod, if it has one.
fn pod_finding(pod: &Pod, probes: &ProbeFailures<'_>) -> Option<Finding> {
    let name = pod.metadata.name.as_deref().unwrap_or("(unnamed)");
    let status = pod.status.as_ref()?;
    if status.reason.as_deref() == Some(EVICTED) {
        let message = status.message.as_deref().map(clean).unwrap_or_default();
        return Some(finding(EVICTED, format!("pod {name} was evicted: {message}"), 0));
    }
    if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
        return None;
    }
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    let worst = containers
        .iter()
        .filter_map(|c| container_finding(pod, name, c, probes))
        .min_by_key(|f| f.rank);
    if worst.is_some() {
        return worst;
    }
    let unschedulable = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some(UNSCHEDULABLE))?;
    let message = unschedulable.message.as_deref().map(clean).unwrap_or_default();
    Some(finding(
        UNSCHEDULABLE,
        format!("pod {name} cannot be scheduled: {message}"),
        0,
    ))
}

fn finding(reason: &str, message: String, restarts: i32) -> Finding {
    Finding {
        rank: rank(reason),
        reason: reason.to_owned(),
        message,
        restarts,
    }
}

fn container_finding(pod: &Pod, pod_name: &str, c: &ContainerStatus, probes: &ProbeFailures<'_>) -> Option<Finding> {
    let who = format!("pod {pod_name}: container {}", c.name);
    let restarts = c.restart_count;
    let state = c.state.as_ref();
    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let current_end = state.and_then(|s| s.terminated.as_ref());
    // The most recent exit: the current state when the container is down, else the last.
    let exit = current_end.or(last);
    if let Some(waiting) = state.and_then(|s| s.waiting.as_ref()) {
        let reason = waiting.reason.as_deref().unwrap_or_default();
        let detail = waiting.message.as_deref().map(clean).unwrap_or_default();
        if IMAGE_PULL_REASONS.contains(&reason) {
            let image = if c.image.is_empty() { "?" } else { c.image.as_str() };
            return Some(finding(
                reason,
                format!("{who} cannot get its image {image:?} ({reason}): {detail}"),
                restarts,
            ));
        }
        if reason == CRASH_LOOP {
            if let Some(end) = exit.filter(|e| e.reason.as_deref() == Some(OOM_KILLED)) {
                return Some(oom(&who, pod, &c.name, end, restarts));
            }
            return Some(crash_loop(&who, exit, restarts, probes));
        }
        if !reason.is_empty() && !NORMAL_WAITING.contains(&reason) {
            let said = clean(reason);
            let reason = if is_condition_reason(reason) {
                reason
            } else {
                "ContainerWaiting"
            };
            return Some(finding(
                reason,
                format!("{who} cannot start ({said}): {detail}"),
                restarts,
            ));
        }
    }
    if let Some(end) = exit.filter(|e| e.reason.as_deref() == Some(OOM_KILLED)) {
        // A container that got back to ready after an OOM kill is no longer the problem.
        if !c.ready {
            return Some(oom(&who, pod, &c.name, end, restarts));
        }
    }
    // A crash loop passes through running (restarted, not yet ready) and terminated between
    // the kubelet's back-offs: one reason for all three, so the pool's REASON and Events do
    // not flap with each restart. Only the very first exit is told apart.
    if !c.ready && restarts > 0 && exit.is_some() {
        return Some(crash_loop(&who, exit, restarts, probes));
    }
    if let Some(end) = exit.filter(|_| !c.ready && current_end.is_some()) {
        return Some(finding(
            CONTAINER_EXITED,
            format!(
                "{who} {} ({}){}",
                describe_exit(end, probes),
                times(restarts),
                last_words(Some(end))
            ),
            restarts,
        ));
    }
    let running = state.is_some_and(|s| s.running.is_some());
    if running
        && c.started == Some(true)
        && !c.ready
        && let Some(answer) = probes.readiness()
    {
        return Some(finding(
            UNHEALTHY,
            format!("{who} runs but is not ready: {}", clean(answer)),
            restarts,
        ));
    }
    None
}

fn crash_loop(
    who: &str,
    exit: Option<&ContainerStateTerminated>,
    restarts: i32,
    probes: &ProbeFailures<'_>,
) -> Finding {
    let how = exit
        .map(|e| describe_exit(e, probes))
        .unwrap_or_else(|| "exited".to_owned());
    finding(
        CRASH_LOOP,
        format!("{who} keeps exiting ({}; {how}){}", times(restarts), last_words(exit)),
        restarts,
    )
}

fn oom(who: &str, pod: &Pod, container: &str, end: &ContainerStateTerminated, restarts: i32) -> Finding {
    let limit = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == container))
        .and_then(|c| c.resources.as_ref()?.limits.as_ref()?.get("memory"))
        .map(|q| format!(" of {}", q.0))
        .unwrap_or_default();
    finding(
        OOM_KILLED,
        format!(
            "{who} was killed for using more than its memory limit{limit} (OOMKilled; {}){}",
            times(restarts),
            last_words(Some(end))
        ),
        restarts,
    )
}

fn times(restarts: i32) -> String {
    match restarts {
        1 => "restarted once".to_owned(),
        n => format!("restarted {n} times"),
    }
}

/// "exited with code 1", "was killed by signal 9 (SIGKILL)", "exited with code 0 (stopped by
/// the kubelet: Liveness probe failed: ...)".
fn describe_exit(end: &ContainerStateTerminated, probes: &ProbeFailures<'_>) -> String {
    let code = end.exit_code;
    let signal = end.signal.or_else(|| (code > 128).then(|| code - 128));
    // The kubelet stops a container whose liveness or startup probe fails: SIGTERM, on
    // which the executor drains and exits 0, then SIGKILL after the grace period.
    let stopped_by_kubelet = probes
        .restart_cause()
        .map(|m| format!(" (stopped by the kubelet: {})", clean(m)));
    match signal {
        Some(s) => {
            let name = match s {
                6 => " (SIGABRT)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                15 => " (SIGTERM)",
                _ => "",
            };
            let why = stopped_by_kubelet.filter(|_| matches!(s, 9 | 15)).unwrap_or_default();
            format!("was killed by signal {s}{name}, exit code {code}{why}")
        }
        None if code == 0 => format!(
            "exited with code 0{}",
            stopped_by_kubelet
                .unwrap_or_else(|| " (stopped by the kubelet: a failing liveness or startup probe?)".to_owned())
        ),
        None => format!("exited with code {code}"),
    }
}

/// `: <the last line the executor wrote>` from the termination message (the executor's
/// fatal error, or with `FallbackToLogsOnError` the tail of its log), or nothing.
fn last_words(end: Option<&ContainerStateTerminated>) -> String {
    end.and_then(|e| e.message.as_deref())
        .and_then(last_line)
        .map(|line| format!(": {line}"))
        .unwrap_or_default()
}

/// The last non-empty line of `text`, without terminal escapes, trimmed to a readable length.
pub fn last_line(text: &str) -> Option<String> {
    let plain = strip_ansi(text);
    plain
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(|l| truncate(&clean(l), MAX_QUOTE_CHARS))
}

/// One line of plain text: escapes removed, control characters and line breaks made spaces,
/// runs of spaces folded, trimmed to [`MAX_QUOTE_CHARS`].
pub fn clean(text: &str) -> String {
    let plain = strip_ansi(text);
    let spaced: String = plain.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    truncate(
        &spaced.split_whitespace().collect::<Vec<_>>().join(" "),
        MAX_QUOTE_CHARS,
    )
}

/// `text` cut to at most `max` characters, with an ellipsis when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Removes ANSI escape sequences (colours from a log tail): CSI `ESC [ ... final`, OSC
/// `ESC ] ... BEL` or `ESC ] ... ESC \`, and `ESC x` with any intermediates (`ESC ( B`).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' && c != '\u{9b}' {
            out.push(c);
            continue;
        }
        let csi = c == '\u{9b}' || chars.peek() == Some(&'[');
        if csi {
            if c == '\u{1b}' {
                chars.next();
            }
            // Parameters and intermediates, then one final byte in '@'..='~'.
            for n in chars.by_ref() {
                if ('@'..='~').contains(&n) {
                    break;
                }
            }
        } else if chars.peek() == Some(&']') {
            chars.next();
            while let Some(n) = chars.next() {
                if n == '\u{7}' {
                    break;
                }
                if n == '\u{1b}' && chars.peek() == Some(&'\\') {
                    chars.next();
                    break;
                }
            }
        } else {
            // nF escapes: intermediates (' '..='/'), then one final character.
            while chars.next_if(|n| (' '..='/').contains(n)).is_some() {}
            chars.next();
        }
    }
    out
}

/// Whether `reason` is valid as a condition reason (the API server's pattern).
fn is_condition_reason(reason: &str) -> bool {
    let mut chars = reason.chars();
    reason.len() <= 1024
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && reason
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        && !reason.ends_with([',', ':'])
}

/// The finding to report: the lowest rank, then the pod that restarted most (then the first
/// message, for a stable answer); its message says how many other pods share its reason and
/// which other reasons were found.
fn choose(mut findings: Vec<Finding>) -> Option<Problem> {
    findings.sort_by(|a, b| {
        a.rank
            .cmp(&b.rank)
            .then(b.restarts.cmp(&a.restarts))
            .then(a.message.cmp(&b.message))
    });
    let first = findings.first()?;
    let alike = findings.iter().filter(|f| f.reason == first.reason).count() - 1;
    let mut others: BTreeMap<(u8, &str), usize> = BTreeMap::new();
    for f in findings.iter().filter(|f| f.reason != first.reason) {
        *others.entry((f.rank, f.reason.as_str())).or_insert(0) += 1;
    }
    let mut message = first.message.clone();
    if alike > 0 {
        let pods = if alike == 1 { "pod" } else { "pods" };
        message.push_str(&format!(" (and {alike} more {pods} alike)"));
    }
    if !others.is_empty() {
        let list: Vec<String> = others
            .iter()
            .map(|((_, reason), n)| match n {
                1 => (*reason).to_owned(),
                n => format!("{reason} ×{n}"),
            })
            .collect();
        message.push_str(&format!("; also {}", list.join(", ")));
    }
    Some(Problem {
        reason: first.reason.clone(),
        message: truncate(&message, MAX_MESSAGE_CHARS),
    })
}

#[cfg(test)]
mod tests;
