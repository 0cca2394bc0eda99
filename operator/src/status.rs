//! Pool status and its KEP-1623 conditions (Ready, Progressing, Degraded), computed purely
//! from the pool, its live Deployment, its pods and the previous status.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::crd::{GatewayStatus, SandboxPool, SandboxPoolStatus, SessionsStatus};
use crate::diagnose::{self, Observed, Problem};
use crate::labels;
use crate::live_sessions::LiveSessions;
use crate::resolve::{InvalidSpec, ResolvedPool};
use crate::units::show_bytes;

/// Condition type: every desired executor is ready.
pub const READY: &str = "Ready";
/// Condition type: a rollout is in progress.
pub const PROGRESSING: &str = "Progressing";
/// Condition type: the pool cannot reach or keep its desired state.
pub const DEGRADED: &str = "Degraded";
/// Reason used on every condition when the spec cannot be honoured.
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Reason used when a child's name is taken by an object the pool does not own.
pub const OBJECT_CONFLICT: &str = "ObjectConflict";
/// Reason used when the operator's policy refuses the pool.
pub const POLICY_REFUSED: &str = "PolicyRefused";
/// Reason used when the API server refuses a child the operator applies.
pub const APPLY_REJECTED: &str = "ApplyRejected";

/// One condition's desired state, before timestamps.
struct Want<'a> {
    type_: &'a str,
    status: bool,
    reason: &'a str,
    message: String,
}

/// Builds the conditions, keeping `lastTransitionTime` from `previous` when a condition's
/// status did not change (so an unchanged pool yields an identical status and no write).
fn conditions(previous: &[Condition], wants: Vec<Want<'_>>, generation: Option<i64>, now: &Time) -> Vec<Condition> {
    wants
        .into_iter()
        .map(|w| {
            let status = if w.status { "True" } else { "False" }.to_owned();
            let last_transition_time = previous
                .iter()
                .find(|c| c.type_ == w.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: w.type_.to_owned(),
                status,
                reason: w.reason.to_owned(),
                message: w.message,
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

fn previous(pool: &SandboxPool) -> &[Condition] {
    pool.status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default()
}

/// Status for a pool whose spec cannot be honoured. Replica counts are carried over,
/// because the pool's existing objects are left untouched.
pub fn invalid(pool: &SandboxPool, error: &InvalidSpec, now: &Time) -> SandboxPoolStatus {
    failed(pool, INVALID_SPEC, &error.to_string(), now)
}

/// Status for a pool whose child objects cannot be applied because another object holds
/// one of their names.
pub fn conflict(pool: &SandboxPool, message: &str, now: &Time) -> SandboxPoolStatus {
    failed(pool, OBJECT_CONFLICT, message, now)
}

/// Status for a pool the operator's policy refuses.
pub fn refused(pool: &SandboxPool, refusal: &InvalidSpec, now: &Time) -> SandboxPoolStatus {
    failed(pool, POLICY_REFUSED, &refusal.to_string(), now)
}

/// Status for a pool whose child the API server refused (admission, validation, RBAC).
pub fn apply_rejected(pool: &SandboxPool, message: &str, now: &Time) -> SandboxPoolStatus {
    failed(pool, APPLY_REJECTED, message, now)
}

/// The gateway's replica counts from its live Deployment, and the address clients call.
pub fn gateway_status(resolved: &ResolvedPool, deployment: &Deployment, cluster_domain: &str) -> GatewayStatus {
    let status = deployment.status.clone().unwrap_or_default();
    GatewayStatus {
        replicas: status.replicas.unwrap_or(0),
        ready_replicas: status.ready_replicas.unwrap_or(0),
        endpoint: Some(format!(
            "http://{}.{}.svc.{}:{}",
            resolved.gateway_name(),
            resolved.namespace,
            cluster_domain,
            labels::HTTP_PORT
        )),
    }
}

/// The pool's session capacity as configured: per pod, and over the ready pods. The live
/// counts are added by the reconcile ([`set_live_sessions`]), which reads them from the
/// custom metrics API: the operator does not reach the pods.
pub fn sessions_status(resolved: &ResolvedPool, ready_replicas: i32) -> Option<SessionsStatus> {
    let s = resolved.sessions.as_ref()?;
    Some(SessionsStatus {
        max_per_pod: i32::try_from(s.max_per_pod).unwrap_or(i32::MAX),
        capacity: i64::from(s.max_per_pod) * i64::from(ready_replicas.max(0)),
        memory_per_pod: (s.max_per_pod > 0).then(|| show_bytes(s.memory_bytes)),
        ..SessionsStatus::default()
    })
}

/// Puts what the custom metrics API reported into the status; `None` (not served, not
/// allowed, nothing reported) leaves the live fields out rather than carrying old ones over,
/// so the status never shows counts nobody reported this time.
pub fn set_live_sessions(sessions: &mut SessionsStatus, live: Option<LiveSessions>) {
    sessions.open = live.map(|l| l.open);
    sessions.open_per_pod_max = live.map(|l| l.open_per_pod_max);
    sessions.reporting_pods = live.map(|l| l.reporting_pods);
}

/// Not ready, not progressing, degraded, all for `reason`; counts, endpoint and sessions
/// carried over (the last good spec's objects keep serving).
pub fn failed(pool: &SandboxPool, reason: &str, message: &str, now: &Time) -> SandboxPoolStatus {
    let old = pool.status.clone().unwrap_or_default();
    let generation = pool.metadata.generation;
    let want = |type_, status| Want {
        type_,
        status,
        reason,
        message: message.to_owned(),
    };
    let wants = vec![want(READY, false), want(PROGRESSING, false), want(DEGRADED, true)];
    SandboxPoolStatus {
        conditions: conditions(previous(pool), wants, generation, now),
        observed_generation: generation,
        selector: Some(labels::selector_string(&pool.name_any())),
        ..old
    }
}

/// Whether the pool's last status said its rollout of the current generation had finished
/// (complete, or complete and since degraded by lost pods).
fn rollout_finished_for(pool: &SandboxPool) -> bool {
    let generation = pool.metadata.generation;
    previous(pool).iter().any(|c| {
        c.observed_generation == generation
            && ((c.type_ == PROGRESSING && c.reason == "RolloutComplete")
                || (c.type_ == DEGRADED && c.reason == "ReplicasUnavailable"))
    })
}

/// Whether the Deployment has every desired executor running the current spec, ready and
/// available, and no more: then there is nothing in its pods to diagnose, and the reconcile
/// does not list them.
pub fn settled(deployment: &Deployment, desired: i32) -> bool {
    let Some(status) = deployment.status.as_ref() else {
        return false;
    };
    let seen_latest = match (deployment.metadata.generation, status.observed_generation) {
        (Some(generation), Some(observed)) => observed >= generation,
        (None, _) => true,
        (Some(_), None) => false,
    };
    let failing = status.conditions.iter().flatten().any(|c| {
        (c.type_ == "ReplicaFailure" && c.status == "True") || (c.type_ == "Progressing" && c.status == "False")
    });
    seen_latest
        && !failing
        && [
            status.replicas,
            status.ready_replicas,
            status.updated_replicas,
            status.available_replicas,
        ]
        .iter()
        .all(|n| n.unwrap_or(0) == desired)
}

/// Status for a pool whose objects were applied, from its live Deployment and what was read
/// about its pods (nothing when they were not listed: see [`settled`]). A problem the pods or the Deployment
/// show ([`diagnose::diagnose`]) becomes the reason of `Degraded` and, while executors are
/// missing, of `Ready`, so `kubectl get sbp` says `CrashLoopBackOff`, not `ReplicasNotReady`.
pub fn from_deployment(
    pool: &SandboxPool,
    resolved: &ResolvedPool,
    deployment: &Deployment,
    observed: &Observed,
    cluster_domain: &str,
    now: &Time,
) -> SandboxPoolStatus {
    let problem = diagnose::diagnose(deployment, observed, now);
    with_problem(pool, resolved, deployment, problem, cluster_domain, now)
}

fn with_problem(
    pool: &SandboxPool,
    resolved: &ResolvedPool,
    deployment: &Deployment,
    problem: Option<Problem>,
    cluster_domain: &str,
    now: &Time,
) -> SandboxPoolStatus {
    let desired = resolved.replicas;
    let status = deployment.status.clone().unwrap_or_default();
    let replicas = status.replicas.unwrap_or(0);
    let ready = status.ready_replicas.unwrap_or(0);
    let updated = status.updated_replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    let seen_latest = match (deployment.metadata.generation, status.observed_generation) {
        (Some(generation), Some(observed)) => observed >= generation,
        (None, _) => true,
        (Some(_), None) => false,
    };
    let deployment_condition = |type_: &str| status.conditions.iter().flatten().find(|c| c.type_ == type_);
    let deadline_exceeded = deployment_condition("Progressing")
        .filter(|c| c.status == "False")
        .map(|c| {
            c.message
                .clone()
                .unwrap_or_else(|| "progress deadline exceeded".to_owned())
        });
    // Every pod runs the current template; not yet that they are all available.
    let template_current = seen_latest && updated == desired;
    let rolled_out = template_current && replicas == desired && available == desired;
    // A rollout that finished and then lost pods is not rolling out again: the Deployment
    // says so (its Progressing reason), or our own last status did for this generation.
    let finished_before = template_current
        && !rolled_out
        && (deployment_condition("Progressing")
            .is_some_and(|c| c.status == "True" && c.reason.as_deref() == Some("NewReplicaSetAvailable"))
            || rollout_finished_for(pool));
    let rolled_out_then_lost = finished_before && deadline_exceeded.is_none();

    let ready_message = format!("{ready}/{desired} executors ready");
    // Ready means the pool serves at full size, even while a rollout replaces pods.
    let ready_want = if ready >= desired {
        Want {
            type_: READY,
            status: true,
            reason: "AllReplicasReady",
            message: ready_message,
        }
    } else if let Some(problem) = &problem {
        Want {
            type_: READY,
            status: false,
            reason: &problem.reason,
            message: format!("{ready_message}: {}", problem.message),
        }
    } else {
        Want {
            type_: READY,
            status: false,
            reason: "ReplicasNotReady",
            message: ready_message,
        }
    };
    let progressing_want = match (&deadline_exceeded, rolled_out) {
        (Some(message), _) => Want {
            type_: PROGRESSING,
            status: false,
            reason: "ProgressDeadlineExceeded",
            message: message.clone(),
        },
        (None, done) if done || rolled_out_then_lost => Want {
            type_: PROGRESSING,
            status: false,
            reason: "RolloutComplete",
            message: format!("{updated}/{desired} executors run the current spec"),
        },
        (None, _) => Want {
            type_: PROGRESSING,
            status: true,
            reason: "RollingOut",
            message: format!("{updated}/{desired} executors run the current spec"),
        },
    };
    let degraded_want = if let Some(problem) = &problem {
        Want {
            type_: DEGRADED,
            status: true,
            reason: &problem.reason,
            message: problem.message.clone(),
        }
    } else if let Some(message) = deadline_exceeded {
        // A Progressing=False the Deployment gave another reason than its deadline.
        Want {
            type_: DEGRADED,
            status: true,
            reason: "ProgressDeadlineExceeded",
            message,
        }
    } else if rolled_out_then_lost {
        Want {
            type_: DEGRADED,
            status: true,
            reason: "ReplicasUnavailable",
            message: format!("only {available}/{desired} executors available after the rollout finished"),
        }
    } else {
        Want {
            type_: DEGRADED,
            status: false,
            reason: "AsExpected",
            message: "no problems detected".to_owned(),
        }
    };

    let generation = pool.metadata.generation;
    SandboxPoolStatus {
        replicas,
        ready_replicas: ready,
        selector: Some(labels::selector_string(&resolved.name)),
        endpoint: Some(resolved.endpoint(cluster_domain)),
        // Filled in by the caller from the gateway's Deployment (see [`gateway_status`]).
        gateway: None,
        sessions: sessions_status(resolved, ready),
        observed_generation: generation,
        conditions: conditions(
            previous(pool),
            vec![ready_want, progressing_want, degraded_want],
            generation,
            now,
        ),
    }
}

#[cfg(test)]
mod tests;
