use serde_json::{Value, json};

use super::*;
use crate::defaults::PoolDefaults;
use crate::resolve::resolve;
use crate::test_pool::pool;

const OPERATOR_IMAGE: &str = "ghcr.io/sandpool/executor:0.1.0";

fn check(policy: &Policy, spec: Value, default_class: Option<&str>) -> Result<(), Refusal> {
    let pool = pool(spec);
    let defaults = PoolDefaults {
        executor_image: OPERATOR_IMAGE.to_owned(),
        runtime_class_name: default_class.map(str::to_owned),
        ..PoolDefaults::default()
    };
    let resolved = resolve(&pool, &defaults, "evals").expect("valid spec");
    let class = pool
        .spec
        .isolation
        .as_ref()
        .and_then(|i| i.runtime_class_name.as_deref());
    policy.check(&resolved, class, OPERATOR_IMAGE, default_class)
}

fn refused_field(policy: &Policy, spec: Value) -> String {
    check(policy, spec, None).expect_err("policy must refuse").field
}

#[test]
fn by_default_only_the_operators_executor_repository_is_allowed() {
    let p = Policy::default();
    assert!(check(&p, json!({}), None).is_ok());
    for ok in [
        "ghcr.io/sandpool/executor:0.2.0",
        "ghcr.io/sandpool/executor@sha256:0123",
    ] {
        assert!(check(&p, json!({"image": ok}), None).is_ok(), "{ok}");
    }
    for bad in [
        "docker.io/library/ubuntu:24.04",
        "ghcr.io/sandpool/executor-evil:0.1.0",
        "ghcr.io/sandpool/executor/sub:1",
        "ghcr.io/sandpool/executorx",
    ] {
        let err = check(&p, json!({"image": bad}), None).expect_err(bad);
        assert_eq!(err.field, "spec.image", "{bad}");
        assert!(err.message.contains("ghcr.io/sandpool/executor"), "{}", err.message);
    }
}

#[test]
fn image_patterns_are_exact_repositories_or_prefixes() {
    let p = Policy {
        allowed_images: vec![
            "registry.example.org/sandbox/".to_owned(),
            "quay.io/x/exec:1.0".to_owned(),
        ],
        ..Policy::default()
    };
    assert!(check(&p, json!({"image": "registry.example.org/sandbox/exec:2"}), None).is_ok());
    assert!(check(&p, json!({"image": "quay.io/x/exec:1.0"}), None).is_ok());
    assert_eq!(refused_field(&p, json!({"image": "quay.io/x/exec:1.1"})), "spec.image");
    assert_eq!(
        refused_field(&p, json!({"image": "registry.example.org/sandboxes/x"})),
        "spec.image"
    );
    // The operator's own image is no longer implied once a list is given.
    assert_eq!(refused_field(&p, json!({})), "spec.image");
    assert_eq!(repository("localhost:5000/a/b:1@sha256:ff"), "localhost:5000/a/b");
    assert_eq!(repository("localhost:5000/a/b"), "localhost:5000/a/b");
}

#[test]
fn a_pool_cannot_leave_the_default_runtime_class_unless_allowed() {
    let p = Policy::default();
    let runc = json!({"isolation": {"runtimeClassName": "runc"}});
    let err = check(&p, runc.clone(), Some("gvisor")).expect_err("leaves gVisor");
    assert_eq!(err.field, "spec.isolation.runtimeClassName");
    assert!(err.message.contains("gvisor"), "{}", err.message);
    assert!(check(&p, json!({"isolation": {"runtimeClassName": "gvisor"}}), Some("gvisor")).is_ok());
    assert!(check(&p, json!({}), Some("gvisor")).is_ok());
    let allowed = Policy {
        allowed_runtime_classes: vec!["kata".to_owned()],
        ..Policy::default()
    };
    assert!(
        check(
            &allowed,
            json!({"isolation": {"runtimeClassName": "kata"}}),
            Some("gvisor")
        )
        .is_ok()
    );
    assert!(check(&allowed, runc.clone(), Some("gvisor")).is_err());
    // No operator default: nothing to drop, so any class, unless a list narrows it.
    assert!(check(&p, json!({"isolation": {"runtimeClassName": "gvisor"}}), None).is_ok());
    assert!(check(&allowed, runc, None).is_err());
}

#[test]
fn control_plane_and_wildcard_tolerations_are_refused() {
    let p = Policy::default();
    assert_eq!(
        refused_field(&p, json!({"tolerations": [{"operator": "Exists"}]})),
        "spec.tolerations[0]"
    );
    assert_eq!(
        refused_field(
            &p,
            json!({"tolerations": [{"key": "sandbox", "operator": "Exists"},
                                   {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]})
        ),
        "spec.tolerations[1].key"
    );
    assert_eq!(
        refused_field(
            &p,
            json!({"gpu": {"count": 1, "tolerations": [{"operator": "Exists"}]}})
        ),
        "spec.gpu.tolerations[0]"
    );
    // Ordinary dedicated-node and GPU tolerations are fine.
    assert!(
        check(
            &p,
            json!({"gpu": {"count": 1}, "tolerations": [{"key": "sandbox", "operator": "Exists"}]}),
            None
        )
        .is_ok()
    );
    // "*" does not reach control-plane keys; naming them exactly does.
    let star = Policy {
        allowed_toleration_keys: vec!["*".to_owned()],
        ..Policy::default()
    };
    assert!(
        check(
            &star,
            json!({"tolerations": [{"key": "node-role.kubernetes.io/master"}]}),
            None
        )
        .is_err()
    );
    let listed = Policy {
        allowed_toleration_keys: vec!["example.com/".to_owned()],
        ..Policy::default()
    };
    assert!(check(&listed, json!({"tolerations": [{"key": "example.com/gpu"}]}), None).is_ok());
    assert_eq!(
        refused_field(&listed, json!({"tolerations": [{"key": "sandbox"}]})),
        "spec.tolerations[0].key"
    );
}

#[test]
fn control_plane_node_selection_is_refused() {
    let p = Policy::default();
    assert_eq!(
        refused_field(
            &p,
            json!({"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}})
        ),
        "spec.nodeSelector[\"node-role.kubernetes.io/control-plane\"]"
    );
    assert_eq!(
        refused_field(
            &p,
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "node-role.kubernetes.io/master", "operator": "Exists"}]}]}}}})
        ),
        "spec.affinity.nodeAffinity"
    );
    assert!(check(&p, json!({"nodeSelector": {"pool": "sandbox"}}), None).is_ok());
}

#[test]
fn namespaces_by_list_and_selector() {
    let labels = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>()
    };
    let p = Policy {
        namespaces: vec!["evals".to_owned()],
        ..Policy::default()
    };
    assert!(p.check_namespace("evals", &labels(&[])).is_ok());
    let err = p.check_namespace("kube-system", &labels(&[])).expect_err("not listed");
    assert_eq!(err.field, "metadata.namespace");
    let p = Policy {
        namespace_selector: Some("sandpool.dev/pools=allowed, !frozen".to_owned()),
        ..Policy::default()
    };
    assert!(p.needs_namespace_labels());
    assert!(
        p.check_namespace("a", &labels(&[("sandpool.dev/pools", "allowed")]))
            .is_ok()
    );
    assert!(
        p.check_namespace("a", &labels(&[("sandpool.dev/pools", "allowed"), ("frozen", "")]))
            .is_err()
    );
    assert!(p.check_namespace("kube-system", &labels(&[])).is_err());
    assert!(!Policy::default().needs_namespace_labels());
    assert!(selector_matches("a!=b", &labels(&[])));
    assert!(!selector_matches("a", &labels(&[])));
}
