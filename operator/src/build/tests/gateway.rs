//! The gateway's objects: rendered only for HTTP pools that keep it on, selected apart from
//! the executors, and fenced in by NetworkPolicies on both sides.

use super::*;

fn http_pool() -> ResolvedPool {
    resolved(json!({"access": {"http": true}}))
}

fn gw(pool: &ResolvedPool) -> GatewayChildren {
    gateway(pool).expect("an HTTP pool gets a gateway")
}

fn executor_port(port: i32) -> Value {
    json!([{"protocol": "TCP", "port": port}])
}

#[test]
fn only_http_pools_that_keep_it_on_get_a_gateway() {
    assert!(gateway(&resolved(json!({}))).is_none(), "no HTTP, no gateway");
    assert!(gateway(&resolved(json!({"gateway": {"replicas": 3}}))).is_none());
    assert!(
        gateway(&resolved(
            json!({"access": {"http": true}, "gateway": {"enabled": false}})
        ))
        .is_none()
    );
    assert!(
        gateway(&resolved(
            json!({"access": {"http": true}, "gateway": {"enabled": true}})
        ))
        .is_some()
    );
    assert!(children(&http_pool()).gateway.is_some());
    assert!(children(&resolved(json!({}))).gateway.is_none());
    // Without a gateway, the pool's NetworkPolicy admits no gateway pods.
    let np = to_json(&network_policy(&resolved(
        json!({"access": {"http": true}, "gateway": {"enabled": false}}),
    )));
    assert_eq!(np["spec"]["ingress"].as_array().map(Vec::len), Some(1), "{np}");
}

#[test]
fn gateway_labels_never_select_executors_and_executor_selectors_never_gateways() {
    let http = http_pool();
    let g = gw(&http);
    let children = children(&http);
    let pod_labels = to_json(&g.deployment)["spec"]["template"]["metadata"]["labels"].clone();
    let executor_pod_labels = to_json(&children.deployment)["spec"]["template"]["metadata"]["labels"].clone();
    let matches = |selector: &Value, labels: &Value| {
        selector
            .as_object()
            .expect("matchLabels")
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    };
    let executor_selectors = [
        to_json(&children.deployment)["spec"]["selector"]["matchLabels"].clone(),
        to_json(&children.service)["spec"]["selector"].clone(),
        to_json(&children.network_policy)["spec"]["podSelector"]["matchLabels"].clone(),
        to_json(&children.disruption_budget.expect("budget"))["spec"]["selector"]["matchLabels"].clone(),
    ];
    for selector in &executor_selectors {
        assert!(
            !matches(selector, &pod_labels),
            "{selector} selects gateway pods {pod_labels}"
        );
    }
    let gateway_selectors = [
        to_json(&g.deployment)["spec"]["selector"]["matchLabels"].clone(),
        to_json(&g.service)["spec"]["selector"].clone(),
        to_json(&g.network_policy)["spec"]["podSelector"]["matchLabels"].clone(),
    ];
    for selector in &gateway_selectors {
        assert_eq!(selector, &gateway_selector());
        assert!(matches(selector, &pod_labels));
        assert!(!matches(selector, &executor_pod_labels), "{selector} selects executors");
    }
    // Nothing that looks for a pool's executors by the pool label finds a gateway pod.
    assert!(pod_labels.get("sandpool.dev/pool").is_none(), "{pod_labels}");
    assert!(
        pod_labels.get("role").is_none(),
        "gateways are not admitted as clients by label"
    );
    // Users cannot add the gateway's label to executor pods.
    let e = crate::resolve::resolve(
        &pool(json!({"podTemplate": {"labels": {"sandpool.dev/gateway": "python"}}})),
        &PoolDefaults::default(),
        "default",
    )
    .expect_err("reserved label");
    assert_eq!(e.field, "spec.podTemplate.labels[\"sandpool.dev/gateway\"]");
}

#[test]
fn every_gateway_object_is_named_labelled_and_owned() {
    let g = gw(&http_pool());
    let metas = [
        to_json(&g.service_account)["metadata"].clone(),
        to_json(&g.role)["metadata"].clone(),
        to_json(&g.role_binding)["metadata"].clone(),
        to_json(&g.network_policy)["metadata"].clone(),
        to_json(&g.service)["metadata"].clone(),
        to_json(&g.deployment)["metadata"].clone(),
    ];
    for meta in metas {
        assert_eq!(meta["name"], "python-gateway");
        assert_eq!(meta["namespace"], "evals");
        assert_eq!(meta["labels"]["app.kubernetes.io/component"], "gateway");
        assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "sandpool-operator");
        assert_eq!(meta["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(meta["ownerReferences"][0]["controller"], true);
    }
}

#[test]
fn the_pools_network_policy_admits_its_gateway_on_http_only() {
    let np = to_json(&network_policy(&http_pool()));
    assert_eq!(
        np["spec"]["ingress"],
        json!([{
            "from": [{"podSelector": {"matchLabels": {"role": "sandbox-user"}}}],
            "ports": [{"protocol": "TCP", "port": 50051}, {"protocol": "TCP", "port": 8080}],
        }, {
            "from": [{"podSelector": {"matchLabels": gateway_selector()}}],
            "ports": executor_port(8080),
        }])
    );
    assert_eq!(np["spec"]["egress"], json!([]), "executors still reach nothing");
}

#[test]
fn gateway_network_policy_admits_the_pools_clients_and_reaches_only_executors_dns_and_the_api() {
    let clients = json!([{"namespaceSelector": {"matchLabels": {"team": "ml"}},
                          "podSelector": {"matchLabels": {"app": "eval-runner"}}}]);
    let scrapers = json!([{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]);
    let fenced = resolved(json!({"access": {"http": true, "clients": clients, "metricsClients": scrapers}}));
    assert_eq!(
        to_json(&gw(&fenced).network_policy)["spec"],
        json!({
            "podSelector": {"matchLabels": gateway_selector()},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": clients, "ports": executor_port(8080)},
                {"from": scrapers, "ports": executor_port(9090)},
            ],
            "egress": [
                {"to": [{"podSelector": {"matchLabels": selector()}}], "ports": executor_port(8080)},
                {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                         "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
                 "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]},
            ],
        })
    );
    // No clients: no ingress rule (a rule without `from` would admit everyone).
    let closed = resolved(json!({"access": {"http": true, "clients": []}}));
    assert_eq!(to_json(&gw(&closed).network_policy)["spec"]["ingress"], json!([]));
    // The API server ports follow the operator's setting.
    let defaults = PoolDefaults {
        api_server_ports: vec![8443],
        ..PoolDefaults::default()
    };
    let p = crate::resolve::resolve(&pool(json!({"access": {"http": true}})), &defaults, "default").expect("valid");
    assert_eq!(
        to_json(&gw(&p).network_policy)["spec"]["egress"][2],
        json!({"ports": [{"protocol": "TCP", "port": 8443}]})
    );
}

#[test]
fn gateway_may_only_list_and_watch_endpoint_slices() {
    let g = gw(&http_pool());
    assert_eq!(
        to_json(&g.role)["rules"],
        json!([{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}])
    );
    assert_eq!(
        to_json(&g.role_binding)["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "python-gateway"})
    );
    assert_eq!(
        to_json(&g.role_binding)["subjects"],
        json!([{"kind": "ServiceAccount", "name": "python-gateway", "namespace": "evals"}])
    );
    // The operator itself holds what the Role grants (RBAC escalation prevention).
    for verb in ["list", "watch"] {
        assert!(crate::rbac::granted("discovery.k8s.io", "endpointslices", verb));
    }
    assert!(
        !crate::rbac::RULES
            .iter()
            .any(|r| r.verbs.iter().any(|v| ["escalate", "bind"].contains(v)))
    );
    assert_eq!(to_json(&g.service_account)["automountServiceAccountToken"], false);
}

#[test]
fn gateway_service_is_cluster_ip_with_http_and_metrics() {
    let svc = to_json(&gw(&http_pool()).service);
    assert_eq!(
        svc["spec"],
        json!({
            "type": "ClusterIP",
            "selector": gateway_selector(),
            "ports": [
                {"name": "http", "port": 8080, "targetPort": "http", "protocol": "TCP"},
                {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"},
            ],
        })
    );
}

#[test]
fn gateway_deployment_runs_the_gateway_locked_down() {
    let pool = http_pool();
    let d = to_json(&gw(&pool).deployment);
    let spec = &d["spec"];
    assert_eq!(spec["replicas"], 1);
    assert_eq!(spec["selector"]["matchLabels"], gateway_selector());
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "python-gateway");
    assert_eq!(
        pod["automountServiceAccountToken"], true,
        "the EndpointSlice watch needs it"
    );
    assert_eq!(pod["enableServiceLinks"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let c = &pod["containers"][0];
    assert_eq!(c["image"], crate::defaults::default_operator_image());
    assert_eq!(c["command"], json!(["/sandpool-gateway"]));
    assert_eq!(
        c["args"],
        json!([
            "--listen",
            "0.0.0.0:8080",
            "--metrics-listen",
            "0.0.0.0:9090",
            "--service",
            "python",
            "--port-name",
            "http"
        ])
    );
    assert_eq!(
        c["env"],
        json!([{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}])
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "metrics");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(
        c["securityContext"],
        json!({
            "runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "privileged": false,
            "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        })
    );
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}})
    );
    assert!(pod.get("hostNetwork") == Some(&json!(false)));
    assert!(pod.get("imagePullSecrets").is_none(), "none unless the pool has some");
}

#[test]
fn gateway_replicas_resources_and_image_come_from_the_spec() {
    let pool = resolved(
        json!({"access": {"http": true}, "imagePullSecrets": [{"name": "regcred"}], "gateway": {
            "replicas": 4,
            "image": "ghcr.io/sandpool/operator:custom",
            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}},
        }}),
    );
    let d = to_json(&gw(&pool).deployment);
    assert_eq!(d["spec"]["replicas"], 4);
    assert_eq!(
        d["spec"]["template"]["spec"]["imagePullSecrets"],
        json!([{"name": "regcred"}])
    );
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "ghcr.io/sandpool/operator:custom");
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}})
    );
}
