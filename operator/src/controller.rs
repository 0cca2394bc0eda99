//! The `run` subcommand: wires the reconcile loop to watches, leader election, the health
//! and metrics endpoint, and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, controller, watcher};
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::config::OperatorConfig;
use crate::crd::SandboxPool;
use crate::http::{self, Health};
use crate::labels::{FIELD_MANAGER, POOL_LABEL};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::reconcile::{self, Context};

/// Settings of `sandpool-operator run`.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Namespace to watch; `None` watches all namespaces.
    pub namespace: Option<String>,
    /// Defaults and policy for pools.
    pub pools: OperatorConfig,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    pub http_listen: SocketAddr,
    /// Lease namespace and identity; `None` disables leader election (one replica only).
    pub leader: Option<(String, String)>,
    /// Most pools reconciled at once (kube-runtime's default, 0, is unbounded): a restart or
    /// a change to every pool then queues all of them at the API server at once.
    pub max_concurrent_reconciles: u16,
}

/// Why `run` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No usable kubeconfig or in-cluster config.
    #[error("cannot configure a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    /// The SandboxPool CRD is not installed or not readable.
    #[error("cannot list SandboxPools (is the CRD installed and RBAC granted?): {0}")]
    Crd(#[source] kube::Error),
    /// Leader election could not start.
    #[error("leader election: {0}")]
    Leader(#[from] kube_lease_manager::LeaseManagerError),
    /// Another replica took over; exiting lets this one restart as a standby.
    #[error("lost the leader lease")]
    LostLeadership,
    /// The HTTP endpoint could not bind.
    #[error("health endpoint: {0}")]
    Http(#[source] std::io::Error),
}

/// Runs the operator until SIGTERM/SIGINT (or lost leadership), with the client that the
/// environment configures (in-cluster or `KUBECONFIG`).
pub async fn run(config: RunConfig) -> Result<(), RunError> {
    let client = Client::try_default().await.map_err(RunError::Client)?;
    run_with_client(client, config).await
}

/// [`run`] with a given client.
pub async fn run_with_client(client: Client, config: RunConfig) -> Result<(), RunError> {
    let metrics = Metrics::default();
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let health = Arc::new(Health {
        registry,
        ready: Default::default(),
    });

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutdown requested");
        let _ = stop_tx.send(true);
    });
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    let listener = tokio::net::TcpListener::bind(config.http_listen)
        .await
        .map_err(RunError::Http)?;
    let server = tokio::spawn(http::serve(listener, health.clone(), stopped()));

    let pools: Api<SandboxPool> = api(&client, config.namespace.as_deref());
    pools
        .list(&ListParams::default().limit(1))
        .await
        .map_err(RunError::Crd)?;
    health.ready.store(true, Ordering::Relaxed);

    let leadership = match &config.leader {
        None => None,
        Some((namespace, identity)) => {
            let mut leadership = Leadership::start(client.clone(), namespace, identity).await?;
            tracing::info!(%namespace, %identity, "waiting for the leader lease");
            tokio::select! {
                acquired = leadership.acquired() => {
                    if !acquired {
                        return Err(RunError::LostLeadership);
                    }
                }
                () = stopped() => {
                    leadership.release().await;
                    return Ok(());
                }
            }
            tracing::info!("leading");
            metrics.leader.set(1);
            Some(leadership)
        }
    };

    let lost = leadership.as_ref().map(Leadership::lost);
    let (lost_tx, mut lost_rx) = watch::channel(false);
    let stop = stopped();
    let shutdown = async move {
        match lost {
            Some(lost) => tokio::select! {
                () = stop => {}
                () = lost => { let _ = lost_tx.send(true); }
            },
            None => stop.await,
        }
    };

    tracing::info!(namespace = ?config.namespace, "watching SandboxPools");
    let pod_namespaces = pod_watch_namespaces(config.namespace.as_deref(), &config.pools.policy.namespaces);
    let ctx = Arc::new(Context::new(client.clone(), config.pools, metrics.clone()));
    let owned = child_watch_config();
    let ns = config.namespace.as_deref();
    let mut controller = Controller::new(pools, watcher::Config::default())
        .with_config(controller::Config::default().concurrency(config.max_concurrent_reconciles))
        .owns(api::<Deployment>(&client, ns), owned.clone())
        .owns(api::<Service>(&client, ns), owned.clone())
        .owns(api::<NetworkPolicy>(&client, ns), owned.clone())
        .owns(api::<PodDisruptionBudget>(&client, ns), owned.clone())
        .owns(api::<ServiceAccount>(&client, ns), owned);
    // Tenants ConfigMaps are read only where the operator manages pools (as pods are below:
    // it has no business reading other namespaces' ConfigMaps), and watched only where a
    // list is allowed: an operator newer than its chart's Role keeps reconciling pools
    // without tenants.
    for cm_ns in &pod_namespaces {
        let config_maps = api::<ConfigMap>(&client, cm_ns.as_deref());
        let probe = ListParams::default().labels(&pod_selector()).limit(1);
        match config_maps.list(&probe).await {
            Ok(_) => controller = controller.owns(config_maps, config_map_watch_config()),
            Err(error) => tracing::warn!(
                namespace = ?cm_ns,
                error = %crate::error_chain(&error),
                "cannot list ConfigMaps (does the operator's Role grant configmaps list/watch?); edits to tenants ConfigMaps wait for the next resync"
            ),
        }
    }
    // A pod that crashes, is refused a node or fails its probe changes no child of the pool,
    // only its own status: watch executor pods too, so the pool says why within seconds.
    // A watch the API server refuses would back off every trigger of the controller (they
    // share one stream), so pods are watched only where a list is allowed: an operator
    // newer than its chart's Role still reconciles, just without naming pod failures.
    for pod_ns in &pod_namespaces {
        let pods = api::<Pod>(&client, pod_ns.as_deref());
        let probe = ListParams::default().labels(&pod_selector()).limit(1);
        match pods.list(&probe).await {
            Ok(_) => controller = controller.watches(pods, pod_watch_config(), pool_of_pod),
            Err(error) => tracing::warn!(
                namespace = ?pod_ns,
                error = %crate::error_chain(&error),
                "cannot list executor pods (does the operator's Role grant pods list/watch?); pools will not say why their pods fail"
            ),
        }
    }
    metrics.pool_ready.watch(Some(controller.store()));
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((pool, _)) => tracing::debug!(pool = %pool, "reconciled"),
                Err(error) => tracing::debug!(error = %crate::error_chain(&error), "reconcile did not complete"),
            }
        })
        .await;

    metrics.leader.set(0);
    metrics.pool_ready.watch(None);
    let lost_leadership = lost_rx.borrow_and_update().to_owned();
    if let Some(leadership) = leadership {
        leadership.release().await;
    }
    if lost_leadership {
        // No shutdown signal came, so the server would wait for one forever.
        server.abort();
        return Err(RunError::LostLeadership);
    }
    let _ = server.await;
    tracing::info!("stopped");
    Ok(())
}

/// How children are watched: every object of the kind, mapped to its pool by owner
/// reference. A label filter would miss a child whose label someone removed until the next
/// resync, and the owner reference is what decides whose child it is.
pub fn child_watch_config() -> watcher::Config {
    watcher::Config::default()
}

/// How tenants ConfigMaps are watched: only those the operator labelled. Unlike the other
/// kinds, every namespace is full of ConfigMaps (some large) that are not ours; one whose
/// label someone removed is still put back at the next resync.
pub fn config_map_watch_config() -> watcher::Config {
    watcher::Config::default().labels(&pod_selector())
}

/// How executor pods are watched: only pods the operator's Deployments made (their
/// template's labels), so the cache holds no other workload of the namespace.
pub fn pod_watch_config() -> watcher::Config {
    watcher::Config::default().labels(&pod_selector())
}

fn pod_selector() -> String {
    format!("app.kubernetes.io/managed-by={FIELD_MANAGER},{POOL_LABEL}")
}

/// The pool whose reconcile a pod's change triggers: its pool label, in its namespace.
pub fn pool_of_pod(pod: Pod) -> Option<ObjectRef<SandboxPool>> {
    let pool = pod.metadata.labels.as_ref()?.get(POOL_LABEL)?;
    let namespace = pod.metadata.namespace.as_deref()?;
    Some(ObjectRef::new(pool).within(namespace))
}

/// Where executor pods are watched: the watched namespace; in cluster-wide mode each managed
/// namespace when a list is set (the operator may read pods only there), else everywhere.
pub fn pod_watch_namespaces(watched: Option<&str>, managed: &[String]) -> Vec<Option<String>> {
    match watched {
        Some(ns) => vec![Some(ns.to_owned())],
        None if !managed.is_empty() => managed.iter().cloned().map(Some).collect(),
        None => vec![None],
    }
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = ctrl_c.await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
