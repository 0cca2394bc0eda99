//! `spec.sessions`: defaults, the budget, and each refusal naming its field.

use serde_json::{Value, json};

use super::resolve_spec;
use crate::plan::{Refusal, plan};
use crate::resolve::ResolvedSessions;
use crate::test_pool::pool;

fn sessions(spec: Value) -> Option<ResolvedSessions> {
    resolve_spec(json!({"sessions": spec})).expect("valid").sessions
}

/// The refusal of a pool with `spec`: (field, message).
fn refused(spec: Value) -> (String, String) {
    let err = resolve_spec(spec).expect_err("spec must be refused");
    (err.field, err.message)
}

fn tenant(name: &str, max_sessions: Option<i32>) -> Value {
    let mut t = json!({"name": name, "tokenSecretRef": {"name": format!("{name}-token"), "key": "token"}});
    if let Some(n) = max_sessions {
        t["maxSessions"] = json!(n);
    }
    t
}

#[test]
fn unset_sessions_stay_unset() {
    assert_eq!(resolve_spec(json!({})).expect("valid").sessions, None);
}

#[test]
fn the_budget_defaults_to_max_per_pod_times_idle_memory() {
    assert_eq!(
        sessions(json!({"maxPerPod": 64})),
        Some(ResolvedSessions {
            max_per_pod: 64,
            idle_bytes: 32 << 20,
            memory_bytes: 2 << 30,
            spares: 0,
            ..Default::default()
        })
    );
    assert_eq!(
        sessions(json!({"maxPerPod": 500, "idleMemory": "32Mi"})),
        Some(ResolvedSessions {
            max_per_pod: 500,
            idle_bytes: 32 << 20,
            memory_bytes: 500 * (32 << 20),
            spares: 0,
            ..Default::default()
        })
    );
    // A larger budget lets some sessions grow past their idle size.
    assert_eq!(
        sessions(json!({"maxPerPod": 100, "idleMemory": "16Mi", "memory": "8Gi"})),
        Some(ResolvedSessions {
            max_per_pod: 100,
            idle_bytes: 16 << 20,
            memory_bytes: 8 << 30,
            spares: 0,
            ..Default::default()
        })
    );
    // No sessions: nothing set aside.
    assert_eq!(
        sessions(json!({"maxPerPod": 0})),
        Some(ResolvedSessions {
            max_per_pod: 0,
            idle_bytes: 32 << 20,
            memory_bytes: 0,
            spares: 0,
            ..Default::default()
        })
    );
    // The bounds themselves are in range.
    for (max, idle) in [(4096, "4Mi"), (1, "4Gi"), (4096, "4Gi")] {
        assert!(
            resolve_spec(json!({"sessions": {"maxPerPod": max, "idleMemory": idle}})).is_ok(),
            "{max} {idle}"
        );
    }
}

#[test]
fn max_per_pod_out_of_range_is_refused() {
    for bad in [-1, 4097, i32::MAX] {
        let (field, message) = refused(json!({"sessions": {"maxPerPod": bad}}));
        assert_eq!(field, "spec.sessions.maxPerPod");
        assert_eq!(message, format!("{bad} is outside 0..=4096"));
    }
}

#[test]
fn idle_memory_must_be_a_quantity_in_range() {
    for bad in ["32MB", "lots", "", "0", "1.5"] {
        let (field, _) = refused(json!({"sessions": {"maxPerPod": 4, "idleMemory": bad}}));
        assert_eq!(field, "spec.sessions.idleMemory", "{bad}");
    }
    for (bad, message) in [
        ("1Mi", "1Mi is outside 4Mi..=4Gi"),
        ("4194303", "4194303 is outside 4Mi..=4Gi"),
        ("5Gi", "5Gi is outside 4Mi..=4Gi"),
    ] {
        assert_eq!(
            refused(json!({"sessions": {"maxPerPod": 4, "idleMemory": bad}})),
            ("spec.sessions.idleMemory".to_owned(), message.to_owned())
        );
    }
}

#[test]
fn a_budget_that_cannot_hold_max_per_pod_idle_sessions_is_refused() {
    assert_eq!(
        refused(json!({"sessions": {"maxPerPod": 500, "memory": "8Gi"}})),
        (
            "spec.sessions.memory".to_owned(),
            "8Gi holds fewer than maxPerPod (500) sessions at idleMemory 32Mi (16000Mi together); \
             raise it or lower maxPerPod"
                .to_owned()
        )
    );
    // Exactly enough is enough.
    assert!(resolve_spec(json!({"sessions": {"maxPerPod": 256, "memory": "8Gi"}})).is_ok());
    let (field, message) = refused(json!({"sessions": {"maxPerPod": 1, "memory": "17Ti"}}));
    assert_eq!(
        (field.as_str(), message.as_str()),
        ("spec.sessions.memory", "17Ti exceeds 16Ti (4096 sessions at 4Gi)")
    );
    let (field, _) = refused(json!({"sessions": {"maxPerPod": 1, "memory": "8GB"}}));
    assert_eq!(field, "spec.sessions.memory");
    // A budget for a pool that serves no sessions would reserve memory for nothing.
    let (field, message) = refused(json!({"sessions": {"maxPerPod": 0, "memory": "1Gi"}}));
    assert_eq!(field, "spec.sessions.memory");
    assert!(message.contains("maxPerPod is 0"), "{message}");
}

#[test]
fn a_tenant_may_not_hold_more_sessions_than_a_pod() {
    let spec = |tenant_cap: Option<i32>, pool_cap: Option<i32>| {
        let mut spec = json!({"tenants": [tenant("rl", Some(4)), tenant("agents", tenant_cap)]});
        if let Some(n) = pool_cap {
            spec["sessions"] = json!({"maxPerPod": n});
        }
        spec
    };
    assert_eq!(
        refused(spec(Some(65), Some(64))),
        (
            "spec.tenants[1].maxSessions".to_owned(),
            "65 exceeds spec.sessions.maxPerPod (64), the sessions each pod holds open; \
             lower it, or leave it out for the pool's cap"
                .to_owned()
        )
    );
    // A pool without sessions: any tenant cap above 0, the first one named.
    let (field, _) = refused(spec(Some(1), Some(0)));
    assert_eq!(field, "spec.tenants[0].maxSessions");
    // At the pool's cap, unset, or no pool cap to compare with (the executor's default).
    for ok in [
        spec(Some(64), Some(64)),
        spec(None, Some(64)),
        spec(Some(65), None),
        spec(Some(0), Some(4)),
    ] {
        assert!(resolve_spec(ok.clone()).is_ok(), "{ok}");
    }
    // Refused before anything is applied, with the spec's reason.
    let refusal = plan(
        &pool(spec(Some(65), Some(64))),
        &crate::config::OperatorConfig::default(),
        "default",
    )
    .expect_err("refused");
    assert!(matches!(refusal, Refusal::InvalidSpec(_)), "{refusal}");
    assert_eq!(refusal.reason(), "InvalidSpec");
}

#[test]
fn spares_become_a_flag_and_grow_the_container_beside_the_budget() {
    let s = sessions(json!({"maxPerPod": 64, "spares": 4})).expect("sessions");
    assert_eq!((s.spares, s.memory_bytes), (4, 2 << 30));
    assert_eq!(s.container_bytes(), (2 << 30) + 4 * (32 << 20));
    assert_eq!(sessions(json!({"maxPerPod": 64})).map(|s| s.spares), Some(0));
    assert_eq!(
        sessions(json!({"maxPerPod": 0, "spares": 0})).map(|s| s.spares),
        Some(0)
    );
    assert!(resolve_spec(json!({"sessions": {"maxPerPod": 1, "spares": 64}})).is_ok());
}

#[test]
fn spares_out_of_range_or_without_sessions_are_refused() {
    for bad in [-1, 65, i32::MAX] {
        let err = resolve_spec(json!({"sessions": {"maxPerPod": 8, "spares": bad}})).expect_err("refused");
        assert_eq!(err.field, "spec.sessions.spares", "{bad}");
    }
    let err = resolve_spec(json!({"sessions": {"maxPerPod": 0, "spares": 2}})).expect_err("refused");
    assert_eq!(err.field, "spec.sessions.spares");
    assert!(err.message.contains("maxPerPod is 0"), "{}", err.message);
}
