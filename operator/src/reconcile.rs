//! The reconcile loop for one pool: plan it, apply the children in a safe order, report
//! status, and back off on errors.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::apply::{self, ApplyError, Outcome};
use crate::build::{self, Children, GatewayChildren};
use crate::config::OperatorConfig;
use crate::crd::{SandboxPool, SandboxPoolStatus};
use crate::diagnose::{self, Observed};
use crate::labels::{self, FIELD_MANAGER};
use crate::live_sessions::{self, LiveSessions};
use crate::metrics::{Metrics, WriteLabels};
use crate::plan::{self, Plan};
use crate::resolve::{InvalidSpec, ResolvedPool};
use crate::status;

/// How often a healthy pool is re-checked even when nothing triggers it.
pub const RESYNC: Duration = Duration::from_secs(300);
/// How often a pool whose live session counts the metrics API answers is re-checked: its
/// `status.sessions.open` is never older than this.
pub const LIVE_RESYNC: Duration = Duration::from_secs(30);
/// First retry delay after a failed reconcile; doubles per failure up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_secs(5);
/// Longest retry delay.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Shared state of the reconcile loop.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Defaults for unset spec fields, and the policy.
    pub config: OperatorConfig,
    /// Reconcile metrics.
    pub metrics: Metrics,
    /// Publishes Kubernetes Events about pools.
    recorder: Recorder,
    /// Consecutive failures per pool (`namespace/name`), for backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// Auth Secrets known to exist (`namespace/name`), so a steady pool makes no create calls.
    secrets: Mutex<HashSet<String>>,
}

impl Context {
    /// A context with no failures recorded.
    pub fn new(client: Client, config: OperatorConfig, metrics: Metrics) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_owned(),
            instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            config,
            metrics,
            failures: Mutex::new(HashMap::new()),
            secrets: Mutex::new(HashSet::new()),
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
    /// The pool's namespace could not be read (for the policy's namespace selector).
    #[error("reading namespace {0}: {1}")]
    Namespace(String, #[source] kube::Error),
}

impl Error {
    /// Short class for the errors metric.
    /// One of [`crate::metrics::RECONCILE_ERRORS`], each exported from the start.
    pub fn class(&self) -> &'static str {
        let [missing_namespace, conflict, api, serialize, status, namespace] = crate::metrics::RECONCILE_ERRORS;
        match self {
            Error::MissingNamespace => missing_namespace,
            Error::Apply(ApplyError::NotOwned { .. }) => conflict,
            Error::Apply(ApplyError::Api { .. }) => api,
            Error::Apply(ApplyError::Serialize { .. }) => serialize,
            Error::Status(_) => status,
            Error::Namespace(..) => namespace,
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
    // Boxed: the reconcile future holds every child object, too large for a small stack
    // (a test's thread) when polled inline.
    let result = Box::pin(reconcile_pool(&pool, &ctx)).await;
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
    tracing::warn!(pool = %key(&pool), error = %crate::error_chain(error), failures, ?delay, "reconcile failed; will retry");
    Action::requeue(delay)
}

/// Delay before retry number `failures` (1-based).
pub fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    MIN_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

/// Whether RBAC refused the request.
fn forbidden(error: &ApplyError) -> bool {
    matches!(error, ApplyError::Api { source: kube::Error::Api(status), .. } if status.code == 403)
}

/// Whether the API server refused the request itself (validation, admission, RBAC), as
/// opposed to failing it; a refusal will not go away by retrying the same object.
fn rejected_by_api_server(error: &ApplyError) -> bool {
    matches!(error, ApplyError::Api { source: kube::Error::Api(status), .. }
        if matches!(status.code, 400 | 403 | 422))
}

#[tracing::instrument(skip_all, fields(pool = %key(pool)))]
async fn reconcile_pool(pool: &SandboxPool, ctx: &Context) -> Result<Action, Error> {
    let namespace = pool.namespace().ok_or(Error::MissingNamespace)?;
    let pools: Api<SandboxPool> = Api::namespaced(ctx.client.clone(), &namespace);
    let now = Time(Timestamp::now());
    let policy = &ctx.config.policy;

    let labels = if policy.needs_namespace_labels() {
        let namespaces: Api<Namespace> = Api::all(ctx.client.clone());
        let ns = namespaces
            .get(&namespace)
            .await
            .map_err(|e| Error::Namespace(namespace.clone(), e))?;
        ns.metadata.labels.unwrap_or_default()
    } else {
        Default::default()
    };
    if let Err(refusal) = policy.check_namespace(&namespace, &labels) {
        tracing::warn!(%refusal, "namespace not managed");
        refuse(ctx, &pools, pool, status::POLICY_REFUSED, &refusal, &now).await?;
        // Namespaces are not watched: a label added later must still be noticed.
        return Ok(Action::requeue(RESYNC));
    }

    let Plan {
        pool: resolved,
        children,
    } = match plan::plan(pool, &ctx.config, &namespace) {
        Ok(plan) => plan,
        Err(refusal) => {
            // Leave the existing objects alone: the last good spec keeps serving.
            tracing::warn!(reason = refusal.reason(), "{refusal}");
            return refuse(ctx, &pools, pool, refusal.reason(), refusal.why(), &now).await;
        }
    };

    let uid = pool.uid();
    let applied = match apply_children(ctx, &resolved, children, uid.as_deref()).await {
        Ok(applied) => applied,
        Err(error @ ApplyError::NotOwned { .. }) => {
            let message = error.to_string();
            publish(
                ctx,
                pool,
                EventType::Warning,
                status::OBJECT_CONFLICT,
                "Apply",
                &message,
            )
            .await;
            write_status(&pools, pool, status::conflict(pool, &message, &now), ctx).await?;
            return Err(error.into());
        }
        Err(error) if rejected_by_api_server(&error) => {
            let message = error.to_string();
            publish(ctx, pool, EventType::Warning, status::APPLY_REJECTED, "Apply", &message).await;
            write_status(&pools, pool, status::apply_rejected(pool, &message, &now), ctx).await?;
            return Err(error.into());
        }
        Err(error) => return Err(error.into()),
    };
    for (reason, note) in &applied.events {
        publish(ctx, pool, EventType::Normal, reason, reason, note).await;
    }

    // A Deployment just created has no pods yet, and a settled one has none worth reading.
    let observed = if applied.created || status::settled(&applied.deployment, resolved.replicas) {
        Observed::default()
    } else {
        observe_pods(ctx, &namespace, &resolved.name).await
    };
    let cluster_domain = &ctx.config.defaults.cluster_domain;
    let mut new_status = status::from_deployment(pool, &resolved, &applied.deployment, &observed, cluster_domain, &now);
    new_status.gateway = applied
        .gateway
        .as_ref()
        .map(|d| status::gateway_status(&resolved, d, cluster_domain));
    let mut open_sessions = None;
    if let Some(sessions) = new_status.sessions.as_mut().filter(|s| s.max_per_pod > 0) {
        let live = live_sessions(ctx, &namespace, &resolved.name, &observed).await;
        status::set_live_sessions(sessions, live);
        open_sessions = live.map(|l| l.open);
    }
    ctx.metrics
        .set_pool_sessions_open(&namespace, &resolved.name, open_sessions);
    if rollout_just_finished(pool, &new_status) {
        let note = format!("{} executors run the current spec", resolved.replicas);
        publish(ctx, pool, EventType::Normal, "RolloutComplete", "Rollout", &note).await;
    }
    if let Some((reason, message)) = newly_degraded(pool.status.as_ref(), &new_status) {
        tracing::warn!(%reason, %message, "pool degraded");
        publish(ctx, pool, EventType::Warning, reason, "Reconcile", message).await;
    }
    if let Some(cause) = recovered(pool.status.as_ref(), &new_status) {
        let note = format!(
            "no longer {cause}: {}/{} executors ready",
            new_status.ready_replicas, resolved.replicas
        );
        tracing::info!(%cause, "pool recovered");
        publish(ctx, pool, EventType::Normal, RECOVERED, "Reconcile", &note).await;
    }
    write_status(&pools, pool, new_status, ctx).await?;
    Ok(Action::requeue(match open_sessions {
        Some(_) => LIVE_RESYNC,
        None => RESYNC,
    }))
}

/// Reports a pool the operator will not act on (invalid spec, refused by policy) with a
/// Warning Event and its status, and waits for the spec to change.
async fn refuse(
    ctx: &Context,
    pools: &Api<SandboxPool>,
    pool: &SandboxPool,
    reason: &str,
    why: &InvalidSpec,
    now: &Time,
) -> Result<Action, Error> {
    publish(ctx, pool, EventType::Warning, reason, "Reconcile", &why.to_string()).await;
    write_status(pools, pool, status::failed(pool, reason, &why.to_string(), now), ctx).await?;
    Ok(Action::await_change())
}

fn progressing_reason(status: Option<&SandboxPoolStatus>) -> Option<&str> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == status::PROGRESSING)
        .map(|c| c.reason.as_str())
}

/// The pool's executor pods (the Deployment's selector), and when one may be failing a
/// probe, the kubelet's `Unhealthy` Events in the namespace (the probe's answer is nowhere
/// else), and when one is still being created, its `FailedMount` Events (a missing Secret). A failure to list either is logged, not fatal: the status then says what the
/// Deployment and the pods say.
async fn observe_pods(ctx: &Context, namespace: &str, pool: &str) -> Observed {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let pods = match pods
        .list(&ListParams::default().labels(&labels::selector_string(pool)))
        .await
    {
        Ok(list) => list.items,
        Err(error) => {
            tracing::warn!(error = %crate::error_chain(&error), "cannot list the pool's pods; reporting from the Deployment alone");
            return Observed::default();
        }
    };
    let mut probe_events = Vec::new();
    let wanted = [
        (diagnose::wants_probe_events(&pods), diagnose::UNHEALTHY),
        (diagnose::wants_mount_events(&pods), diagnose::FAILED_MOUNT),
    ];
    for reason in wanted.into_iter().filter_map(|(want, reason)| want.then_some(reason)) {
        let events: Api<CoreEvent> = Api::namespaced(ctx.client.clone(), namespace);
        match events
            .list(&ListParams::default().fields(&format!("reason={reason}")))
            .await
        {
            Ok(list) => probe_events.extend(list.items),
            Err(error) => {
                tracing::warn!(error = %crate::error_chain(&error), reason, "cannot list the kubelet's Events");
            }
        }
    }
    Observed { pods, probe_events }
}

/// Sessions open on the pool's pods, from the custom metrics API; `None` when it cannot say.
/// Never an error: the counts are a convenience, and a cluster without prometheus-adapter
/// (or its rule, or the operator's RBAC for it) is a normal one, so that is said at debug.
async fn live_sessions(ctx: &Context, namespace: &str, pool: &str, observed: &Observed) -> Option<LiveSessions> {
    // When this reconcile listed the pool's pods, only they count (see live_sessions::summarize).
    let names: BTreeSet<String> = observed.pods.iter().map(|p| p.name_any()).collect();
    let only = (!names.is_empty()).then_some(&names);
    match live_sessions::fetch(&ctx.client, namespace, pool, only).await {
        Ok(live) => live,
        Err(error) if error.unavailable() => {
            tracing::debug!(error = %crate::error_chain(&error), "live sessions unavailable");
            None
        }
        Err(error) => {
            tracing::info!(error = %crate::error_chain(&error), "cannot read live sessions; status.sessions leaves them out");
            None
        }
    }
}

/// The (reason, message) of a `Degraded=True` the last status did not have with this reason:
/// one Warning Event per problem, not one per reconcile (a crash loop's restart count changes
/// the message, not the reason).
fn newly_degraded<'a>(old: Option<&SandboxPoolStatus>, new: &'a SandboxPoolStatus) -> Option<(&'a str, &'a str)> {
    let now = degraded(new)?;
    let before = old.and_then(degraded).map(|c| c.reason.as_str());
    (before != Some(now.reason.as_str())).then_some((now.reason.as_str(), now.message.as_str()))
}

/// Reason of the Normal Event saying a pool's problem has gone.
pub const RECOVERED: &str = "Recovered";

/// The reason the last status was degraded (or refused) for, when the new one is not: the
/// Warning that said what was wrong gets a Normal Event saying it has gone, so `kubectl
/// describe sbp` does not end on a problem that is over.
fn recovered<'a>(old: Option<&'a SandboxPoolStatus>, new: &SandboxPoolStatus) -> Option<&'a str> {
    let before = degraded(old?)?;
    degraded(new).is_none().then_some(before.reason.as_str())
}

/// The `Degraded=True` condition, if the status has one.
fn degraded(s: &SandboxPoolStatus) -> Option<&Condition> {
    s.conditions
        .iter()
        .find(|c| c.type_ == status::DEGRADED && c.status == "True")
}

fn rollout_just_finished(pool: &SandboxPool, new_status: &SandboxPoolStatus) -> bool {
    progressing_reason(pool.status.as_ref()) == Some("RollingOut")
        && progressing_reason(Some(new_status)) == Some("RolloutComplete")
}

/// Publishes an Event about `pool`. A failure is logged, never fatal: Events are for people,
/// and the status carries the same news.
async fn publish(ctx: &Context, pool: &SandboxPool, type_: EventType, reason: &str, action: &str, note: &str) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        // The API server refuses notes over 1 kB.
        note: Some(note.chars().take(1000).collect()),
        action: action.to_owned(),
        secondary: None,
    };
    if let Err(error) = ctx.recorder.publish(&event, &pool.object_ref(&())).await {
        tracing::warn!(error = %crate::error_chain(&error), %reason, "cannot publish an Event");
    }
}

/// What applying the children did: the live Deployment and Events worth telling.
struct Applied {
    deployment: Deployment,
    /// The Deployment did not exist before this reconcile.
    created: bool,
    /// (reason, note) of Normal Events.
    events: Vec<(&'static str, String)>,
    /// The gateway's live Deployment, when the pool has a gateway.
    gateway: Option<Deployment>,
}

/// Applies the children in an order that never leaves a pod unprotected: identity and
/// NetworkPolicy first, the Deployment last. The tenants ConfigMap is applied before the
/// Deployment whose pods mount it, and removed only after the Deployment stops mounting it.
async fn apply_children(
    ctx: &Context,
    pool: &ResolvedPool,
    children: Children,
    owner_uid: Option<&str>,
) -> Result<Applied, ApplyError> {
    let namespace = pool.namespace.as_str();
    let Children {
        service_account,
        network_policy,
        service,
        disruption_budget,
        tenants,
        deployment,
        gateway,
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
    ensure_auth_secret(ctx, pool, owner_uid).await?;
    let tenants_wanted = tenants.is_some();
    if let Some(config_map) = tenants {
        apply_one::<ConfigMap>(ctx, namespace, config_map, owner_uid).await?;
    }

    let desired_replicas = deployment.spec.as_ref().and_then(|s| s.replicas);
    let desired_template = serde_json::to_value(deployment.spec.as_ref().map(|s| &s.template)).ok();
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), namespace);
    let (live, outcome, previous) = apply::ensure_tracked(&api, deployment, owner_uid).await?;
    record(ctx, "Deployment", outcome);
    let mut events = Vec::new();
    match (outcome, previous.and_then(|p| p.spec)) {
        (Outcome::Created, _) => events.push((
            "Created",
            format!("created {} executors", desired_replicas.unwrap_or(0)),
        )),
        (Outcome::Updated, Some(before)) => {
            if before.replicas != desired_replicas {
                events.push((
                    "Scaled",
                    format!(
                        "scaled from {} to {} executors",
                        before.replicas.unwrap_or(1),
                        desired_replicas.unwrap_or(0)
                    ),
                ));
            }
            let before_template = serde_json::to_value(&before.template).ok();
            if let (Some(want), Some(have)) = (&desired_template, &before_template)
                && !apply::is_subset(want, have)
            {
                events.push(("RolloutStarted", "replacing executors to run the new spec".to_owned()));
            }
        }
        _ => {}
    }
    if !tenants_wanted {
        let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), namespace);
        match apply::ensure_absent(&api, &build::tenants_config_map_name(&name), owner_uid).await {
            Ok(outcome) => record(ctx, "ConfigMap", outcome),
            // An operator newer than its chart's Role: a pool without tenants needs no
            // ConfigMap, so not being allowed to look for a stale one fails nothing.
            Err(error) if forbidden(&error) => {
                tracing::warn!(error = %crate::error_chain(&error), "cannot check for a stale tenants ConfigMap");
            }
            Err(error) => return Err(error),
        }
    }
    // Boxed: the reconcile future is large already, and a test thread's stack is small.
    let gateway = match gateway {
        Some(gateway) => Some(Box::pin(apply_gateway(ctx, namespace, *gateway, owner_uid)).await?),
        None => {
            Box::pin(remove_gateway(ctx, pool, owner_uid)).await?;
            None
        }
    };
    Ok(Applied {
        deployment: live,
        created: outcome == Outcome::Created,
        events,
        gateway,
    })
}

/// Applies the gateway's objects: identity and permissions first, its NetworkPolicy before
/// its pods, the Deployment last. Returns the live Deployment (for the status).
async fn apply_gateway(
    ctx: &Context,
    namespace: &str,
    gateway: GatewayChildren,
    owner_uid: Option<&str>,
) -> Result<Deployment, ApplyError> {
    let GatewayChildren {
        service_account,
        role,
        role_binding,
        network_policy,
        service,
        deployment,
    } = gateway;
    apply_one::<ServiceAccount>(ctx, namespace, service_account, owner_uid).await?;
    apply_one::<Role>(ctx, namespace, role, owner_uid).await?;
    apply_one::<RoleBinding>(ctx, namespace, role_binding, owner_uid).await?;
    apply_one::<NetworkPolicy>(ctx, namespace, network_policy, owner_uid).await?;
    apply_one::<Service>(ctx, namespace, service, owner_uid).await?;
    apply_one::<Deployment>(ctx, namespace, deployment, owner_uid).await
}

/// Removes a gateway the pool no longer wants (HTTP or the gateway turned off). Its
/// NetworkPolicy is looked at first and deleted last, so one GET tells a pool that never had
/// a gateway, and a removal cut short is finished by the next reconcile. By then the pool's
/// own NetworkPolicy no longer admits gateway pods, so one still terminating reaches nothing.
async fn remove_gateway(ctx: &Context, pool: &ResolvedPool, owner_uid: Option<&str>) -> Result<(), ApplyError> {
    let namespace = pool.namespace.as_str();
    let name = pool.gateway_name();
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), namespace);
    let present = policies.get_opt(&name).await.map_err(|source| ApplyError::Api {
        kind: "NetworkPolicy".to_owned(),
        name: name.clone(),
        source,
    })?;
    if present.is_none() {
        return Ok(());
    }
    remove_one::<Deployment>(ctx, namespace, &name, owner_uid).await?;
    remove_one::<Service>(ctx, namespace, &name, owner_uid).await?;
    remove_one::<RoleBinding>(ctx, namespace, &name, owner_uid).await?;
    remove_one::<Role>(ctx, namespace, &name, owner_uid).await?;
    remove_one::<ServiceAccount>(ctx, namespace, &name, owner_uid).await?;
    remove_one::<NetworkPolicy>(ctx, namespace, &name, owner_uid).await
}

async fn remove_one<K>(ctx: &Context, namespace: &str, name: &str, owner_uid: Option<&str>) -> Result<(), ApplyError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + std::fmt::Debug + DeserializeOwned,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), namespace);
    let outcome = apply::ensure_absent(&api, name, owner_uid).await?;
    record(ctx, &K::kind(&()), outcome);
    Ok(())
}

/// Creates the pool's auth Secret with a fresh token if it does not exist. The operator may
/// only create Secrets, never read them: an existing one is left as it is. Remembered per
/// pool *instance* (its uid): the Secret is owned by the pool, so a pool deleted and created
/// again under the same name lost its Secret with the old one and needs a new one.
async fn ensure_auth_secret(ctx: &Context, pool: &ResolvedPool, owner_uid: Option<&str>) -> Result<(), ApplyError> {
    let Some(auth) = pool.auth.as_ref().filter(|a| a.create) else {
        return Ok(());
    };
    let key = format!("{}/{}/{}", pool.namespace, auth.secret_name, owner_uid.unwrap_or(""));
    if ctx.secrets.lock().unwrap_or_else(|e| e.into_inner()).contains(&key) {
        return Ok(());
    }
    let token = build::random_token().map_err(|e| ApplyError::Api {
        kind: "Secret".to_owned(),
        name: auth.secret_name.clone(),
        source: kube::Error::Service(Box::new(e)),
    })?;
    let Some(secret) = build::auth_secret(pool, &token) else {
        return Ok(());
    };
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &pool.namespace);
    let outcome = apply::create_if_absent(&api, &secret).await?;
    record(ctx, "Secret", outcome);
    ctx.secrets.lock().unwrap_or_else(|e| e.into_inner()).insert(key);
    Ok(())
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
