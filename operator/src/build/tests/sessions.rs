//! `spec.sessions`: the executor's session flags, and the container's memory growing by the
//! sessions' budget.

use serde_json::{Value, json};

use super::{example, resolved, to_json};
use crate::build::{deployment, executor_args};

fn session_args(spec: Value) -> Vec<String> {
    executor_args(&resolved(spec))
        .into_iter()
        .filter(|a| a.starts_with("--max-sessions") || a.starts_with("--session-"))
        .collect()
}

fn container_resources(spec: Value) -> Value {
    to_json(&deployment(&resolved(spec)))["spec"]["template"]["spec"]["containers"][0]["resources"].clone()
}

fn with_sessions(mut spec: Value, sessions: Value) -> Value {
    spec["sessions"] = sessions;
    spec
}

#[test]
fn sessions_set_all_three_executor_flags() {
    assert_eq!(
        session_args(json!({"sessions": {"maxPerPod": 500, "idleMemory": "32Mi"}})),
        [
            "--max-sessions=500",
            "--session-idle-bytes=33554432",
            // 500 × 32Mi
            "--session-memory-bytes=16777216000",
        ]
    );
    // The operator's defaults are written too: they size the pod's memory.
    assert_eq!(
        session_args(json!({"sessions": {"maxPerPod": 64}})),
        [
            "--max-sessions=64",
            "--session-idle-bytes=33554432",
            "--session-memory-bytes=2147483648",
        ]
    );
    assert_eq!(
        session_args(json!({"sessions": {"maxPerPod": 10, "idleMemory": "64Mi", "memory": "4Gi"}})),
        [
            "--max-sessions=10",
            "--session-idle-bytes=67108864",
            "--session-memory-bytes=4294967296",
        ]
    );
    // Before the fixed tail, like the other optional flags.
    let args = executor_args(&resolved(json!({"sessions": {"maxPerPod": 8}})));
    assert_eq!(
        args[args.len() - 3..],
        [
            "--session-memory-bytes=268435456",
            "--drain-timeout-ms=145480",
            "--work-root=/var/lib/sandpool"
        ]
    );
}

#[test]
fn without_sessions_the_old_cap_and_no_memory_change() {
    // Half the slots (at least one): what pools held before sessions stopped holding slots,
    // not the executor's own default of 64, which no pod's memory was sized for.
    let slots = resolved(example()).slots;
    assert_eq!(
        session_args(example()),
        [format!("--max-sessions={}", (slots / 2).max(1))]
    );
    assert_eq!(session_args(json!({"concurrency": 1})), ["--max-sessions=1"]);
    assert_eq!(
        container_resources(example()),
        json!({"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}})
    );
    assert_eq!(container_resources(json!({})), Value::Null);
}

#[test]
fn a_pool_without_sessions_sets_only_the_cap() {
    let spec = with_sessions(example(), json!({"maxPerPod": 0, "idleMemory": "64Mi"}));
    assert_eq!(session_args(spec.clone()), ["--max-sessions=0"]);
    assert_eq!(
        container_resources(spec),
        json!({"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}})
    );
}

#[test]
fn the_memory_request_and_limit_grow_by_the_budget() {
    // 4Gi + 500 × 32Mi = 4096Mi + 16000Mi.
    let spec = with_sessions(example(), json!({"maxPerPod": 500, "idleMemory": "32Mi"}));
    assert_eq!(
        container_resources(spec),
        json!({"requests": {"cpu": "2", "memory": "20096Mi"}, "limits": {"cpu": "2", "memory": "20096Mi"}})
    );
    // An explicit budget is what is added.
    let spec = with_sessions(example(), json!({"maxPerPod": 64, "memory": "8Gi"}));
    assert_eq!(
        container_resources(spec),
        json!({"requests": {"cpu": "2", "memory": "12Gi"}, "limits": {"cpu": "2", "memory": "12Gi"}})
    );
    // Decimal and binary quantities add by value; the sum is spelt in bytes when it is
    // not whole Mi.
    let spec = json!({"resources": {"requests": {"memory": "4G"}, "limits": {"memory": "5G"}},
                      "sessions": {"maxPerPod": 10}});
    assert_eq!(
        container_resources(spec),
        json!({"requests": {"memory": "4335544320"}, "limits": {"memory": "5335544320"}})
    );
}

#[test]
fn only_the_memory_the_spec_names_grows() {
    // A request alone: no limit appears.
    let spec = json!({"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}, "sessions": {"maxPerPod": 64}});
    assert_eq!(
        container_resources(spec),
        json!({"requests": {"cpu": "1", "memory": "3Gi"}})
    );
    // A limit alone: Kubernetes copies it into the request, so no request is added.
    let spec = json!({"resources": {"limits": {"memory": "2Gi"}}, "sessions": {"maxPerPod": 64}});
    assert_eq!(container_resources(spec), json!({"limits": {"memory": "4Gi"}}));
    // Neither: the request is the budget, so the scheduler sets the sessions' memory aside.
    let spec = json!({"resources": {"requests": {"cpu": "1"}}, "sessions": {"maxPerPod": 64}});
    assert_eq!(
        container_resources(spec),
        json!({"requests": {"cpu": "1", "memory": "2Gi"}})
    );
    assert_eq!(
        container_resources(json!({"sessions": {"maxPerPod": 16}})),
        json!({"requests": {"memory": "512Mi"}})
    );
}

#[test]
fn gpu_pools_add_the_budget_to_their_default_memory_request() {
    let spec = json!({"gpu": {"count": 1}, "concurrency": 2, "sessions": {"maxPerPod": 32}});
    assert_eq!(
        container_resources(spec),
        json!({"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "2", "memory": "5Gi"}})
    );
}

#[test]
fn runs_keep_the_memory_the_spec_gave_them() {
    // maxMemory derives from the spec's limit (1Gi less the executor's headroom), not from
    // the limit grown for sessions.
    let max_memory = |spec: Value| -> Vec<String> {
        executor_args(&resolved(spec))
            .into_iter()
            .filter(|a| a.starts_with("--max-memory-bytes"))
            .collect()
    };
    let bare = json!({"resources": {"limits": {"memory": "1Gi"}}});
    let with = with_sessions(bare.clone(), json!({"maxPerPod": 64}));
    assert_eq!(max_memory(bare), ["--max-memory-bytes=738197504"]);
    assert_eq!(max_memory(with), ["--max-memory-bytes=738197504"]);
}

#[test]
fn spares_are_a_flag_and_memory_beside_the_budget() {
    assert_eq!(
        session_args(json!({"sessions": {"maxPerPod": 64, "spares": 4}})),
        [
            "--max-sessions=64",
            "--session-idle-bytes=33554432",
            "--session-memory-bytes=2147483648",
            "--session-spares=4",
        ]
    );
    // 2Gi of budget and 4 × 32Mi of spares on top of the spec's 4Gi.
    assert_eq!(
        container_resources(with_sessions(example(), json!({"maxPerPod": 64, "spares": 4})))["requests"]["memory"],
        json!("6272Mi")
    );
}
