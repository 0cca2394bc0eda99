//! The reconcile loop for one pool: resolve the spec, apply the children in a safe order,
//! report status, and back off on errors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::apply::{self, ApplyError, Outcome};
use crate::build::{self, Children};
use crate::crd::{SandboxPool, SandboxPoolStatus};
use crate::defaults::PoolDefaults;
use crate::labels::FIELD_MANAGER;
use crate::metrics::{Metrics, WriteLabels};
use crate::resolve;
use crate::status;

/// How often a healthy pool is re-checked even when nothing triggers it.
pub const RESYNC: Duration = Duration::from_secs(300);
/// First retry delay after a failed reconcile; doubles per failure up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_secs(5);
/// Longest retry delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Shared state of the reconcile loop.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Defaults for unset spec fields.
    pub defaults: PoolDefaults,
    /// Reconcile metrics.
    pub metrics: Metrics,
    /// Consecutive failures per pool (`namespace/name`), for backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    /// A context with no failures recorded.
    pub fn new(client: Client, defaults: PoolDefaults, metrics: Metrics) -> Self {
        Self {
            client,
            defaults,
            metrics,
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records one more failure for `key` and returns the count.
    fn fail(&self, key: String) -> u32 {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let count = failures.entry(key).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    fn succeed(&self, key: &str) {
        self.failures.lock().unwrap_or_else(|e| e.into_inner()).remove(key);
    }
}

/// Why a reconcile failed (it is retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// SandboxPool is namespaced; an object without a namespace cannot be reconciled.
    #[error("SandboxPool has no namespace")]
    MissingNamespace,
    /// A child object could not be applied.
    #[error(transparent)]
    Apply(#[from] ApplyError),
    /// The status could not be written.
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
}

impl Error {
    /// Short class for the errors metric.
    pub fn class(&self) -> &'static str {
        match self {
            Error::MissingNamespace => "missing_namespace",
            Error::Apply(ApplyError::NotOwned { .. }) => "conflict",
            Error::Apply(ApplyError::Api { .. }) => "api",
            Error::Apply(ApplyError::Serialize { .. }) => "serialize",
            Error::Status(_) => "status",
        }
    }
}

fn key(pool: &SandboxPool) -> String {
    format!("{}/{}", pool.namespace().unwrap_or_default(), pool.name_any())
}

/// Reconciles one pool (the controller's reconcile function).
pub async fn reconcile(pool: Arc<SandboxPool>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    ctx.metrics.reconciles.inc();
    let result = reconcile_pool(&pool, &ctx).await;
    ctx.metrics
        .observe(started.elapsed(), result.as_ref().err().map(Error::class));
    if result.is_ok() {
        ctx.succeed(&key(&pool));
    }
    result
}

/// Retries a failed pool with exponential backoff (the controller's error policy).
pub fn error_policy(pool: Arc<SandboxPool>, error: &Error, ctx: Arc<Context>) -> Action {
    let failures = ctx.fail(key(&pool));
    let delay = backoff(failures);
    tracing::warn!(pool = %key(&pool), %error, failures, ?delay, "reconcile failed; will retry");
    Action::requeue(delay)
}

/// Delay before retry number `failures` (1-based).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    MIN_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

#[tracing::instrument(skip_all, fields(pool = %key(pool)))]
async fn reconcile_pool(pool: &SandboxPool, ctx: &Context) -> Result<Action, Error> {
    let namespace = pool.namespace().ok_or(Error::MissingNamespace)?;
    let pools: Api<SandboxPool> = Api::namespaced(ctx.client.clone(), &namespace);
    let now = Time(Timestamp::now());

    let resolved = match resolve::resolve(pool, &ctx.defaults, &namespace) {
        Ok(resolved) => resolved,
        Err(invalid) => {
            // Leave the existing objects alone: the last good spec keeps serving.
            tracing::warn!(%invalid, "spec cannot be honoured");
            write_status(&pools, pool, status::invalid(pool, &invalid, &now), ctx).await?;
            return Ok(Action::await_change());
        }
    };

    let uid = pool.uid();
    let deployment = match apply_children(ctx, &namespace, build::children(&resolved), uid.as_deref()).await {
        Ok(deployment) => deployment,
        Err(error @ ApplyError::NotOwned { .. }) => {
            let message = error.to_string();
            write_status(&pools, pool, status::conflict(pool, &message, &now), ctx).await?;
            return Err(error.into());
        }
        Err(error) => return Err(error.into()),
    };

    let new_status = status::from_deployment(pool, &resolved, &deployment, &ctx.defaults.cluster_domain, &now);
    write_status(&pools, pool, new_status, ctx).await?;
    Ok(Action::requeue(RESYNC))
}

/// Applies the children in an order that never leaves a pod unprotected: identity and
/// NetworkPolicy first, the Deployment last. Returns the live Deployment.
async fn apply_children(
    ctx: &Context,
    namespace: &str,
    children: Children,
    owner_uid: Option<&str>,
) -> Result<Deployment, ApplyError> {
    let Children {
        service_account,
        network_policy,
        service,
        disruption_budget,
        deployment,
    } = children;
    let name = deployment.name_any();
    apply_one::<ServiceAccount>(ctx, namespace, service_account, owner_uid).await?;
    apply_one::<NetworkPolicy>(ctx, namespace, network_policy, owner_uid).await?;
    apply_one::<Service>(ctx, namespace, service, owner_uid).await?;
    match disruption_budget {
        Some(pdb) => {
            apply_one::<PodDisruptionBudget>(ctx, namespace, pdb, owner_uid).await?;
        }
        None => {
            let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), namespace);
            let outcome = apply::ensure_absent(&api, &name, owner_uid).await?;
            record(ctx, "PodDisruptionBudget", outcome);
        }
    }
    apply_one::<Deployment>(ctx, namespace, deployment, owner_uid).await
}

async fn apply_one<K>(ctx: &Context, namespace: &str, desired: K, owner_uid: Option<&str>) -> Result<K, ApplyError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + Serialize
        + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let (live, outcome) = apply::ensure(&api, desired, owner_uid).await?;
    record(ctx, &K::kind(&()), outcome);
    Ok(live)
}

fn record(ctx: &Context, kind: &str, outcome: Outcome) {
    if matches!(outcome, Outcome::Created | Outcome::Updated | Outcome::Deleted) {
        ctx.metrics
            .child_writes
            .get_or_create(&WriteLabels {
                kind: kind.to_owned(),
                outcome: outcome.as_str().to_owned(),
            })
            .inc();
    }
}

/// Writes the status with server-side apply, unless it is unchanged.
async fn write_status(
    pools: &Api<SandboxPool>,
    pool: &SandboxPool,
    new_status: SandboxPoolStatus,
    ctx: &Context,
) -> Result<(), Error> {
    if pool.status.as_ref() == Some(&new_status) {
        return Ok(());
    }
    let patch = serde_json::json!({
        "apiVersion": SandboxPool::api_version(&()),
        "kind": SandboxPool::kind(&()),
        "status": new_status,
    });
    pools
        .patch_status(
            &pool.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(Error::Status)?;
    ctx.metrics.status_writes.inc();
    Ok(())
}

#[cfg(test)]
mod tests;
