//! End-to-end test of the operator against a real cluster.
//!
//! Runs only when `KUBECONFIG` names a kubeconfig; otherwise it prints why it was skipped
//! and passes. It installs the CRD, runs the controller in-process for one fresh
//! namespace, applies a pool, waits for Ready, checks every object, scales the pool
//! through the scale subresource, and deletes everything it created.
//!
//! Knobs: `SANDPOOL_E2E_IMAGE` (executor image the cluster can pull; default the
//! operator's default), `SANDPOOL_E2E_TIMEOUT_S` (default 300).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use sandpool_operator::controller::{self, RunConfig};
use sandpool_operator::crd::SandboxPool;
use sandpool_operator::defaults::PoolDefaults;
use serde_json::json;

const MANAGER: &str = "sandpool-e2e";

async fn wait_for<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

fn condition_true(pool: &SandboxPool, type_: &str) -> bool {
    pool.status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

#[tokio::test]
async fn operator_manages_a_pool_in_a_real_cluster() {
    if std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()) {
        eprintln!("operator_e2e skipped: KUBECONFIG is not set, so there is no cluster to test against");
        return;
    }
    let timeout = Duration::from_secs(
        std::env::var("SANDPOOL_E2E_TIMEOUT_S")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300),
    );
    let client = Client::try_default().await.expect("KUBECONFIG gives a working client");

    // CRD, applied the way an upgrade would.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
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
            .is_some_and(|s| {
                s.conditions
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            })
    })
    .await;

    // A namespace of our own, so nothing else is touched.
    let ns_name = format!("sandpool-e2e-{}", std::process::id());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": ns_name}})).expect("namespace");
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace creates");

    let mut defaults = PoolDefaults::default();
    if let Ok(image) = std::env::var("SANDPOOL_E2E_IMAGE") {
        defaults.executor_image = image;
    }
    let operator = tokio::spawn(controller::run(RunConfig {
        namespace: Some(ns_name.clone()),
        defaults,
        http_listen: "127.0.0.1:0".parse().expect("address"),
        leader: None,
    }));

    let pools: Api<SandboxPool> = Api::namespaced(client.clone(), &ns_name);
    let pool: SandboxPool = serde_json::from_value(json!({
        "apiVersion": "sandpool.dev/v1alpha1", "kind": "SandboxPool",
        "metadata": {"name": "e2e", "namespace": ns_name},
        "spec": {
            "replicas": 1,
            "languages": ["python"],
            "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            "limits": {"wallTime": "5s", "maxWallTime": "10s", "memory": "256Mi", "maxMemory": "512Mi"},
            "access": {"http": true},
        }
    }))
    .expect("pool");
    pools.create(&PostParams::default(), &pool).await.expect("pool creates");

    wait_for("the pool to be Ready", timeout, || async {
        pools.get("e2e").await.is_ok_and(|p| condition_true(&p, "Ready"))
    })
    .await;
    let live = pools.get("e2e").await.expect("pool reads");
    let status = live.status.clone().expect("status");
    assert_eq!((status.replicas, status.ready_replicas), (1, 1));
    assert_eq!(
        status.endpoint.as_deref(),
        Some(format!("dns:///e2e.{ns_name}.svc.cluster.local:50051").as_str())
    );
    assert_eq!(status.observed_generation, live.metadata.generation);
    let uid = live.uid().expect("uid");
    let owned = |refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
        refs.iter().any(|r| r.uid == uid && r.controller == Some(true))
    };

    let sa = Api::<ServiceAccount>::namespaced(client.clone(), &ns_name)
        .get("e2e")
        .await
        .expect("SA");
    assert_eq!(sa.automount_service_account_token, Some(false));
    assert!(owned(sa.owner_references()));
    let svc = Api::<Service>::namespaced(client.clone(), &ns_name)
        .get("e2e")
        .await
        .expect("Service");
    let svc_spec = svc.spec.clone().expect("spec");
    assert_eq!(svc_spec.cluster_ip.as_deref(), Some("None"));
    let ports: Vec<i32> = svc_spec.ports.unwrap_or_default().iter().map(|p| p.port).collect();
    assert_eq!(ports, [50051, 8080, 9090]);
    assert!(owned(svc.owner_references()));
    let np = Api::<NetworkPolicy>::namespaced(client.clone(), &ns_name)
        .get("e2e")
        .await
        .expect("NetworkPolicy");
    let np_spec = np.spec.clone().expect("spec");
    assert_eq!(
        np_spec.policy_types,
        Some(vec!["Ingress".to_owned(), "Egress".to_owned()])
    );
    assert!(np_spec.egress.unwrap_or_default().is_empty());
    assert!(owned(np.owner_references()));
    let pdb = Api::<PodDisruptionBudget>::namespaced(client.clone(), &ns_name)
        .get("e2e")
        .await
        .expect("PDB");
    assert!(owned(pdb.owner_references()));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns_name);
    let deploy = deployments.get("e2e").await.expect("Deployment");
    assert!(owned(deploy.owner_references()));
    let pod = deploy.spec.and_then(|s| s.template.spec).expect("pod spec");
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.enable_service_links, Some(false));

    // Scale through the scale subresource, as an HPA would.
    pools
        .patch_scale(
            "e2e",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .expect("scale patch");
    wait_for("the Deployment to follow the scale", timeout, || async {
        deployments
            .get("e2e")
            .await
            .ok()
            .and_then(|d| d.spec)
            .and_then(|s| s.replicas)
            == Some(2)
    })
    .await;
    let scale = pools.get_scale("e2e").await.expect("scale reads");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    assert!(
        scale
            .status
            .and_then(|s| s.selector)
            .is_some_and(|s| s.contains("sandpool.dev/pool=e2e"))
    );

    pools
        .delete("e2e", &DeleteParams::foreground())
        .await
        .expect("pool deletes");
    wait_for("the pool and its Deployment to go", timeout, || async {
        pools.get_opt("e2e").await.is_ok_and(|p| p.is_none())
            && deployments.get_opt("e2e").await.is_ok_and(|d| d.is_none())
    })
    .await;
    operator.abort();
    namespaces
        .delete(&ns_name, &DeleteParams::default())
        .await
        .expect("namespace deletes");
}
