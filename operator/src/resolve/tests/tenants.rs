//! `spec.tenants`: each rule refuses with the field it names and `InvalidSpec`.

use serde_json::{Value, json};

use super::resolve_spec;
use crate::crd::Priority;
use crate::plan::{Refusal, plan};
use crate::resolve::ResolvedTenant;
use crate::test_pool::pool;

fn tenant(name: &str) -> Value {
    json!({"name": name, "tokenSecretRef": {"name": format!("{name}-token"), "key": "token"}})
}

/// The refusal of a pool with `spec`: (field, message).
fn refused(spec: Value) -> (String, String) {
    let err = resolve_spec(spec).expect_err("spec must be refused");
    (err.field, err.message)
}

#[test]
fn tenants_resolve_with_unset_caps_left_unset() {
    let p = resolve_spec(json!({"tenants": [
        {"name": "rl", "tokenSecretRef": {"name": "rl-token", "key": "token"}, "weight": 3,
         "maxConcurrency": 8, "maxQueue": 1000, "maxSessions": 4, "maxPriority": "normal"},
        tenant("sweeps"),
    ]}))
    .expect("valid");
    assert_eq!(
        p.tenants,
        Some(vec![
            ResolvedTenant {
                name: "rl".to_owned(),
                secret_name: "rl-token".to_owned(),
                secret_key: "token".to_owned(),
                weight: 3,
                max_concurrency: Some(8),
                max_queue: Some(1000),
                max_sessions: Some(4),
                max_priority: Some(Priority::Normal),
            },
            ResolvedTenant {
                name: "sweeps".to_owned(),
                secret_name: "sweeps-token".to_owned(),
                secret_key: "token".to_owned(),
                weight: 1,
                max_concurrency: None,
                max_queue: None,
                max_sessions: None,
                max_priority: None,
            },
        ])
    );
    assert_eq!(resolve_spec(json!({})).expect("valid").tenants, None);
}

#[test]
fn tenant_names_follow_the_executors_rule() {
    for bad in ["", "RL", "-rl", "rl-", "r_l", "r.l", &"a".repeat(64)] {
        let (field, message) = refused(json!({"tenants": [tenant("ok"), tenant(bad)]}));
        assert_eq!(field, "spec.tenants[1].name", "{bad:?}");
        assert!(message.contains("not a tenant name"), "{bad:?}: {message}");
    }
    for good in ["a", "0", "rl-2", "9lives", &"a".repeat(63)] {
        assert!(resolve_spec(json!({"tenants": [tenant(good)]})).is_ok(), "{good:?}");
    }
}

#[test]
fn tenant_names_are_unique() {
    let (field, message) = refused(json!({"tenants": [tenant("rl"), tenant("sweeps"), tenant("rl")]}));
    assert_eq!(field, "spec.tenants[2].name");
    assert_eq!(message, "\"rl\" is listed twice");
}

#[test]
fn weights_are_one_to_a_thousand() {
    for (weight, ok) in [(0, false), (-1, false), (1, true), (1000, true), (1001, false)] {
        let mut t = tenant("rl");
        t["weight"] = json!(weight);
        let result = resolve_spec(json!({"tenants": [t]}));
        assert_eq!(result.is_ok(), ok, "weight {weight}: {result:?}");
        if let Err(err) = result {
            assert_eq!(err.field, "spec.tenants[0].weight");
            assert!(err.message.contains("1..=1000"), "{}", err.message);
        }
    }
}

#[test]
fn concurrency_is_at_least_one_as_the_executor_requires() {
    for bad in [0, -1] {
        let mut t = tenant("rl");
        t["maxConcurrency"] = json!(bad);
        let (field, message) = refused(json!({"tenants": [t]}));
        assert_eq!(field, "spec.tenants[0].maxConcurrency");
        assert!(message.contains("at least 1"), "{message}");
    }
}

#[test]
fn anonymous_is_the_executors_and_not_a_tenant_name() {
    let (field, message) = refused(json!({"tenants": [tenant("anonymous")]}));
    assert_eq!(field, "spec.tenants[0].name");
    assert!(message.contains("callers without auth"), "{message}");
}

#[test]
fn two_tenants_may_not_share_a_token() {
    let mut b = tenant("b");
    b["tokenSecretRef"] = json!({"name": "a-token", "key": "token"});
    let (field, message) = refused(json!({"tenants": [tenant("a"), b.clone()]}));
    assert_eq!(field, "spec.tenants[1].tokenSecretRef");
    assert!(message.contains("spec.tenants[0]"), "{message}");
    // Another key of the same Secret is another token.
    b["tokenSecretRef"]["key"] = json!("other");
    assert!(resolve_spec(json!({"tenants": [tenant("a"), b]})).is_ok());
}

#[test]
fn caps_are_not_negative() {
    for cap in ["maxQueue", "maxSessions"] {
        let mut t = tenant("rl");
        t[cap] = json!(-1);
        let (field, message) = refused(json!({"tenants": [t]}));
        assert_eq!(field, format!("spec.tenants[0].{cap}"));
        assert_eq!(message, "must not be negative");
        t[cap] = json!(0);
        assert!(resolve_spec(json!({"tenants": [t]})).is_ok(), "{cap}: 0");
    }
}

#[test]
fn the_token_is_a_valid_secret_name_and_key() {
    for bad in ["", "a/b", "a b", ".", "..", "ключ"] {
        let mut t = tenant("rl");
        t["tokenSecretRef"]["key"] = json!(bad);
        let (field, message) = refused(json!({"tenants": [t]}));
        assert_eq!(field, "spec.tenants[0].tokenSecretRef.key", "{bad:?}");
        assert!(message.contains("not a Secret key"), "{message}");
    }
    for good in ["token", "bearer.txt", "TOKEN_2", "-a.b_c"] {
        let mut t = tenant("rl");
        t["tokenSecretRef"]["key"] = json!(good);
        assert!(resolve_spec(json!({"tenants": [t]})).is_ok(), "{good:?}");
    }
    for bad in ["", "Rl-token", "rl_token", "-rl", "rl..token"] {
        let mut t = tenant("rl");
        t["tokenSecretRef"]["name"] = json!(bad);
        let (field, message) = refused(json!({"tenants": [t]}));
        assert_eq!(field, "spec.tenants[0].tokenSecretRef.name", "{bad:?}");
        assert!(message.contains("not a Secret name"), "{message}");
    }
}

#[test]
fn an_empty_list_is_refused() {
    let (field, message) = refused(json!({"tenants": []}));
    assert_eq!(field, "spec.tenants");
    assert!(message.contains("at least one tenant"), "{message}");
}

#[test]
fn tenants_and_auth_together_are_an_invalid_spec_naming_both() {
    let spec = json!({"auth": {"enabled": true}, "tenants": [tenant("rl")]});
    let refusal = plan(&pool(spec), &Default::default(), "evals").expect_err("refused");
    assert!(matches!(refusal, Refusal::InvalidSpec(_)), "{refusal}");
    assert_eq!(refusal.reason(), "InvalidSpec");
    let why = refusal.why();
    assert_eq!(why.field, "spec.tenants");
    assert!(
        why.message.contains("spec.auth.enabled"),
        "the message names both fields: {why}"
    );
    // auth present but off is no conflict.
    assert!(resolve_spec(json!({"auth": {"enabled": false}, "tenants": [tenant("rl")]})).is_ok());
}
