use serde_json::json;

use super::*;
use crate::defaults::PoolDefaults;
use crate::policy::Policy;
use crate::test_pool::pool;

#[test]
fn a_valid_pool_gets_its_resolved_spec_and_the_builders_children() {
    let p = pool(json!({"replicas": 2, "concurrency": 3}));
    let config = OperatorConfig::default();
    let plan = plan(&p, &config, "default").expect("valid and allowed");
    let resolved = resolve::resolve(&p, &config.defaults, "default").expect("valid");
    assert_eq!(plan.children, build::children(&resolved));
    assert_eq!(plan.pool, resolved);
}

#[test]
fn an_invalid_spec_is_refused_as_invalid_before_the_policy_is_asked() {
    // Both invalid (a negative replica count) and outside the default image policy.
    let p = pool(json!({"replicas": -1, "image": "docker.io/library/ubuntu:24.04"}));
    let refusal = plan(&p, &OperatorConfig::default(), "default").expect_err("must refuse");
    assert!(matches!(refusal, Refusal::InvalidSpec(_)), "{refusal}");
    assert_eq!(refusal.reason(), status::INVALID_SPEC);
    assert_eq!(refusal.why().field, "spec.replicas");
    assert_eq!(refusal.to_string(), "invalid spec: spec.replicas: must not be negative");
}

#[test]
fn a_valid_spec_the_policy_refuses_is_refused_by_policy() {
    let p = pool(json!({"image": "docker.io/library/ubuntu:24.04"}));
    let refusal = plan(&p, &OperatorConfig::default(), "default").expect_err("must refuse");
    assert!(matches!(refusal, Refusal::PolicyRefused(_)), "{refusal}");
    assert_eq!(refusal.reason(), status::POLICY_REFUSED);
    assert_eq!(refusal.why().field, "spec.image");
    assert!(
        refusal
            .to_string()
            .starts_with("refused by the operator's policy: spec.image: "),
        "{refusal}"
    );
}

#[test]
fn the_policy_sees_the_operators_defaults() {
    // A runtime class the spec names is allowed when it is the operator's own default.
    let p = pool(json!({"isolation": {"runtimeClassName": "gvisor"}}));
    let mut config = OperatorConfig {
        defaults: PoolDefaults {
            runtime_class_name: Some("gvisor".to_owned()),
            ..PoolDefaults::default()
        },
        policy: Policy::default(),
    };
    assert!(plan(&p, &config, "default").is_ok());
    config.defaults.runtime_class_name = Some("kata".to_owned());
    let refusal = plan(&p, &config, "default").expect_err("not the default, not allowed");
    assert_eq!(refusal.why().field, "spec.isolation.runtimeClassName");
}

#[test]
fn a_gateway_image_outside_the_policy_is_refused() {
    let with_image = |image: &str| pool(json!({"access": {"http": true}, "gateway": {"image": image}}));
    let config = OperatorConfig::default();
    let own = format!("ghcr.io/sandpool/operator:{}", "custom");
    assert!(
        plan(&with_image(&own), &config, "default").is_ok(),
        "the operator's own repository"
    );
    let refusal = plan(&with_image("docker.io/evil/proxy:1"), &config, "default").expect_err("foreign image");
    assert!(matches!(refusal, Refusal::PolicyRefused(_)), "{refusal}");
    assert_eq!(refusal.why().field, "spec.gateway.image");
    let open = OperatorConfig {
        policy: Policy {
            allowed_images: vec!["ghcr.io/sandpool/".to_owned(), "docker.io/evil/".to_owned()],
            ..Policy::default()
        },
        ..OperatorConfig::default()
    };
    assert!(plan(&with_image("docker.io/evil/proxy:1"), &open, "default").is_ok());
}
