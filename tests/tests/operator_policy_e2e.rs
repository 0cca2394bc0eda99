//! The operator's security boundary against a real API server (scripts/cluster.sh): what
//! only the API server can decide.
//!
//! - CEL rules of the CRD (the pool name's length, a default above its maximum);
//! - extended resources whose requests differ from limits are refused by the API server
//!   (so the operator's own check mirrors a real rule);
//! - the chart's RBAC, rendered by helm and applied, is enough for a whole reconcile
//!   (create, update, delete of a budget, status, Events, the auth Secret) when the operator
//!   runs with the chart's ServiceAccount token instead of admin;
//! - a pool the operator's policy refuses gets nothing but a PolicyRefused status;
//! - an apply the API server rejects (a ValidatingAdmissionPolicy here) becomes an
//!   ApplyRejected condition and a Warning Event.
//!
//! Needs a cluster: `scripts/cluster.sh up && eval "$(scripts/cluster.sh env)"`. Without
//! `KUBECONFIG` and `SANDPOOL_E2E_HELM`/`SANDPOOL_E2E_KUBECTL` it fails: an e2e that skips
//! is not a test.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Api, Client, Config, CustomResourceExt, ResourceExt};
use sandpool_operator::config::OperatorConfig;
use sandpool_operator::crd::SandboxPool;
use sandpool_operator::metrics::Metrics;
use sandpool_operator::reconcile::{self, Context};
use serde_json::{Value, json};

const MANAGER: &str = "sandpool-policy-e2e";
const RELEASE: &str = "sandpool";

fn env(name: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "{name} is not set: start the test cluster (scripts/cluster.sh up; eval \"$(scripts/cluster.sh env)\")"
        ),
    }
}

fn run(program: &str, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut child = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn pool(name: &str, spec: Value) -> SandboxPool {
    serde_json::from_value(json!({
        "apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
        "metadata": {"name": name}, "spec": spec,
    }))
    .expect("test pool deserializes")
}

fn ready_reason(pool: &SandboxPool) -> Option<String> {
    pool.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.reason.clone())
}

/// A client that authenticates as the chart's ServiceAccount in `ns`.
async fn service_account_client(kubectl: &str, ns: &str) -> Client {
    let sa = format!("{RELEASE}-operator");
    let token = run(kubectl, &["create", "token", &sa, "-n", ns, "--duration=1h"], None);
    let mut kubeconfig = Kubeconfig::read_from(env("KUBECONFIG")).expect("admin kubeconfig reads");
    for user in &mut kubeconfig.auth_infos {
        if let Some(auth) = user.auth_info.as_mut() {
            auth.client_certificate = None;
            auth.client_certificate_data = None;
            auth.client_key = None;
            auth.client_key_data = None;
            auth.token = Some(token.trim().to_owned().into());
        }
    }
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig with the token");
    Client::try_from(config).expect("service-account client")
}

async fn reconcile_once(client: Client, pools: &Api<SandboxPool>, name: &str) -> Result<(), String> {
    let live = pools.get(name).await.expect("pool exists");
    let ctx = Arc::new(Context::new(client, OperatorConfig::default(), Metrics::default()));
    reconcile::reconcile(Arc::new(live), ctx)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn the_api_server_agrees_with_the_operators_boundary() {
    let kubectl = env("SANDPOOL_E2E_KUBECTL");
    let helm = env("SANDPOOL_E2E_HELM");
    env("KUBECONFIG");
    let admin = Client::try_default().await.expect("admin client");

    // The CRD, as an upgrade applies it.
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    let crd = SandboxPool::crd();
    crds.patch(
        &crd.name_any(),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("CRD applies");
    wait_for("the CRD to be established", Duration::from_secs(60), || async {
        crds.get(&crd.name_any())
            .await
            .ok()
            .and_then(|c| c.status)
            .and_then(|s| s.conditions)
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"))
    })
    .await;

    let ns = format!(
        "sbp-policy-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis()
            % 1_000_000
    );
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns, "labels": {
                "pod-security.kubernetes.io/enforce": "privileged", "sandpool-e2e": "policy"}}}))
            .expect("namespace"),
        )
        .await
        .expect("namespace creates");
    let pools: Api<SandboxPool> = Api::namespaced(admin.clone(), &ns);
    let pp = PostParams::default();

    // CEL: the name's length and a default above its maximum.
    let err = pools
        .create(&pp, &pool(&"p".repeat(64), json!({})))
        .await
        .expect_err("a 64-character name");
    assert!(err.to_string().contains("at most 63 characters"), "{err}");
    let err = pools
        .create(
            &pp,
            &pool("cel", json!({"limits": {"wallTime": "2m", "maxWallTime": "90s"}})),
        )
        .await
        .expect_err("wallTime above maxWallTime");
    assert!(
        err.to_string().contains("wallTime must not exceed maxWallTime"),
        "{err}"
    );

    // Extended resources cannot be overcommitted: the rule resolve.rs enforces early.
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    let overcommitted: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "overcommit"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
            "metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": {
                "requests": {"example.com/fpga": "1"}, "limits": {"example.com/fpga": "2"}}}]}}}
    }))
    .expect("deployment");
    let err = deployments
        .create(&pp, &overcommitted)
        .await
        .expect_err("requests != limits for an extended resource");
    assert!(err.to_string().contains("example.com/fpga"), "{err}");

    // The chart's ServiceAccount and RBAC, rendered by helm, applied as an admin would.
    let rendered = run(
        &helm,
        &[
            "template",
            RELEASE,
            concat!(env!("CARGO_MANIFEST_DIR"), "/../charts/sandpool"),
            "--namespace",
            &ns,
            "--show-only",
            "templates/serviceaccount.yaml",
            "--show-only",
            "templates/rbac.yaml",
        ],
        None,
    );
    run(&kubectl, &["apply", "-n", &ns, "-f", "-"], Some(&rendered));
    let operator = service_account_client(&kubectl, &ns).await;

    // A whole reconcile with only the chart's permissions: children, auth Secret, status,
    // Events; then a budget removed (delete) and the pool scaled (patch).
    pools
        .create(
            &pp,
            &pool(
                "python",
                json!({"replicas": 2, "languages": ["python"], "auth": {"enabled": true}}),
            ),
        )
        .await
        .expect("pool creates");
    reconcile_once(operator.clone(), &pools, "python")
        .await
        .expect("the chart's RBAC is enough to create a pool");
    let deployment = deployments.get("python").await.expect("Deployment created");
    let owner = &deployment.owner_references()[0];
    assert_eq!(owner.block_owner_deletion, Some(true));
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let token = secrets.get("python-auth").await.expect("auth Secret created");
    let token_len = token.data.as_ref().and_then(|d| d.get("token")).map(|t| t.0.len());
    assert_eq!(token_len, Some(64));
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await
        .expect("events list")
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("python"))
        .filter_map(|e| e.reason)
        .collect();
    assert!(reasons.iter().any(|r| r == "Created"), "{reasons:?}");

    pools
        .patch(
            "python",
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(json!({"apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
                "spec": {"replicas": 3, "languages": ["python"], "auth": {"enabled": true},
                         "disruptionBudget": {"enabled": false}}})),
        )
        .await
        .expect("pool updates");
    reconcile_once(operator.clone(), &pools, "python")
        .await
        .expect("the chart's RBAC is enough to update a pool and delete its budget");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(admin.clone(), &ns);
    wait_for("the budget to be deleted", Duration::from_secs(30), || async {
        pdbs.get_opt("python").await.ok().flatten().is_none()
    })
    .await;
    assert_eq!(
        deployments
            .get("python")
            .await
            .expect("Deployment")
            .spec
            .and_then(|s| s.replicas),
        Some(3)
    );
    // The Secret is never overwritten: a second operator process (no memory of it) tries
    // to create it, is refused with 409, and leaves it alone.
    reconcile_once(operator.clone(), &pools, "python")
        .await
        .expect("steady");
    let again = secrets.get("python-auth").await.expect("auth Secret");
    assert_eq!(again.data, token.data, "the token must not change");

    // Refused by policy: nothing but the status.
    pools
        .create(&pp, &pool("rooted", json!({"image": "docker.io/library/ubuntu:24.04"})))
        .await
        .expect("the API server admits it; the operator's policy refuses it");
    reconcile_once(operator.clone(), &pools, "rooted")
        .await
        .expect("a refusal is reported, not retried");
    let rooted = pools.get("rooted").await.expect("pool");
    assert_eq!(ready_reason(&rooted).as_deref(), Some("PolicyRefused"));
    assert!(deployments.get_opt("rooted").await.expect("get").is_none());

    // An apply the API server rejects: a ValidatingAdmissionPolicy that refuses this pool's
    // Deployment.
    let gvk = |kind: &str| GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    let vap_api: Api<DynamicObject> =
        Api::all_with(admin.clone(), &ApiResource::from_gvk(&gvk("ValidatingAdmissionPolicy")));
    let binding_api: Api<DynamicObject> = Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk(&gvk("ValidatingAdmissionPolicyBinding")),
    );
    let vap_name = format!("{ns}-no-blocked");
    let vap: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": vap_name},
        "spec": {"failurePolicy": "Fail",
                 "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                     "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                 "validations": [{"expression": "object.metadata.name != 'blocked'",
                                  "message": "blocked by the e2e admission policy"}]}
    }))
    .expect("policy");
    vap_api.create(&pp, &vap).await.expect("admission policy creates");
    let binding: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": vap_name},
        "spec": {"policyName": vap_name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}
    }))
    .expect("binding");
    binding_api.create(&pp, &binding).await.expect("binding creates");
    // The policy takes effect once the API server's informers have it: probe with dry runs.
    let mut probe = overcommitted.clone();
    probe.metadata.name = Some("blocked".to_owned());
    if let Some(spec) = probe.spec.as_mut()
        && let Some(pod) = spec.template.spec.as_mut()
    {
        pod.containers[0].resources = None;
    }
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for(
        "the admission policy to take effect",
        Duration::from_secs(60),
        || async { deployments.create(&dry_run, &probe).await.is_err() },
    )
    .await;
    pools
        .create(&pp, &pool("blocked", json!({"languages": ["python"]})))
        .await
        .expect("pool creates");
    wait_for(
        "the apply to be rejected and reported",
        Duration::from_secs(30),
        || async {
            let result = reconcile_once(operator.clone(), &pools, "blocked").await;
            let reason = pools.get("blocked").await.ok().and_then(|p| ready_reason(&p));
            result.is_err() && reason.as_deref() == Some("ApplyRejected")
        },
    )
    .await;
    let blocked = pools.get("blocked").await.expect("pool");
    let message = blocked
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(message.contains("blocked by the e2e admission policy"), "{message}");
    let warnings: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .expect("events list")
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ApplyRejected"))
        .collect();
    assert!(!warnings.is_empty(), "an ApplyRejected Warning Event");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));

    // Cleanup.
    let _ = binding_api.delete(&vap_name, &DeleteParams::default()).await;
    let _ = vap_api.delete(&vap_name, &DeleteParams::default()).await;
    let _ = namespaces.delete(&ns, &DeleteParams::background()).await;
}
