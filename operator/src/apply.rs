//! Server-side apply of child objects, skipped when the live object already matches.
//!
//! Each applied object carries a hash of what the operator applied
//! ([`APPLIED_HASH_ANNOTATION`]). An apply is skipped only when the live object carries the
//! same hash *and* every field the operator sets still has the value it wants; the hash
//! catches fields the operator stopped setting, the field comparison catches edits by others.
//! So a reconcile with nothing to change makes no writes.

use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::labels::{APPLIED_HASH_ANNOTATION, FIELD_MANAGER};

/// What [`ensure`] or [`ensure_absent`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The object did not exist and was applied.
    Created,
    /// The object differed and was applied.
    Updated,
    /// The object already matched; nothing was written.
    Unchanged,
    /// An unwanted object was deleted.
    Deleted,
    /// An unwanted object did not exist (or is not ours); nothing was written.
    Absent,
}

impl Outcome {
    /// Label value for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Created => "created",
            Outcome::Updated => "updated",
            Outcome::Unchanged => "unchanged",
            Outcome::Deleted => "deleted",
            Outcome::Absent => "absent",
        }
    }
}

/// Why a child could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused or failed a request.
    #[error("{kind} {name}: {source}")]
    Api {
        /// Kind of the child.
        kind: String,
        /// Name of the child.
        name: String,
        /// The client error.
        source: kube::Error,
    },
    /// An object with the child's name exists but belongs to someone else; applying over it
    /// would take it over (and delete it with the pool).
    #[error("{kind} {name} already exists and is not owned by this SandboxPool")]
    NotOwned {
        /// Kind of the existing object.
        kind: String,
        /// Its name.
        name: String,
    },
    /// The desired object could not be serialized (a bug, not an input problem).
    #[error("cannot serialize {kind}: {source}")]
    Serialize {
        /// Kind of the child.
        kind: String,
        /// The serializer's complaint.
        source: serde_json::Error,
    },
}

/// Stable 64-bit FNV-1a, so the annotation does not change between operator builds.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Adds the applied-hash annotation (a hash of the object without it) to `desired`.
pub fn stamp<K: Resource + Serialize>(desired: &mut K) -> Result<(), serde_json::Error> {
    desired.annotations_mut().remove(APPLIED_HASH_ANNOTATION);
    let bytes = serde_json::to_vec(desired)?;
    let hash = format!("{:016x}", fnv1a(&bytes));
    desired
        .annotations_mut()
        .insert(APPLIED_HASH_ANNOTATION.to_owned(), hash);
    Ok(())
}

/// Plain (non-pointer) `bool` fields of the objects the operator writes, which the API
/// server stores without `false` values (Go's `omitempty`): a missing one is `false`.
/// Pointer bools (`automountServiceAccountToken`, `readOnlyRootFilesystem`, ...) keep an
/// explicit `false`, so for them a missing field is a real difference.
const OMITTED_WHEN_FALSE: &[&str] = &["hostNetwork", "hostPID", "hostIPC", "publishNotReadyAddresses"];

/// Whether every field set in `desired` has the same value in `live`. Empty values in
/// `desired` (`null`, `[]`, `{}`, and `false` for [`OMITTED_WHEN_FALSE`] fields) also match a
/// missing field, because the API server drops them; lists must match element by element;
/// resource quantities compare by value, because the API server rewrites them in canonical
/// form (`0.5` becomes `500m`).
pub fn is_subset(desired: &Value, live: &Value) -> bool {
    subset_under(desired, live, false)
}

/// `quantity_map`: `desired` maps resource names to quantities (container `requests` and
/// `limits`).
fn subset_under(desired: &Value, live: &Value, quantity_map: bool) -> bool {
    match (desired, live) {
        (Value::Object(want), Value::Object(have)) => want.iter().all(|(key, value)| match have.get(key) {
            Some(live_value) if quantity_map => same_quantity(value, live_value),
            Some(live_value) => subset_under(value, live_value, key == "requests" || key == "limits"),
            None => is_empty(value) || (*value == Value::Bool(false) && OMITTED_WHEN_FALSE.contains(&key.as_str())),
        }),
        (Value::Array(want), Value::Array(have)) => {
            want.len() == have.len() && want.iter().zip(have).all(|(w, h)| subset_under(w, h, false))
        }
        (want, Value::Null) => is_empty(want),
        (want, have) => want == have,
    }
}

fn same_quantity(want: &Value, have: &Value) -> bool {
    match (want.as_str(), have.as_str()) {
        (Some(w), Some(h)) if w != h => matches!(
            (crate::units::quantity(w), crate::units::quantity(h)),
            (Ok(w), Ok(h)) if w == h
        ),
        _ => want == have,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn owned_by<K: Resource>(object: &K, owner_uid: Option<&str>) -> bool {
    match owner_uid {
        // Without an owner (render), ownership cannot be checked.
        None => true,
        Some(uid) => object
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && o.uid == uid),
    }
}

/// Makes the live object match `desired` with one server-side apply under the operator's
/// field manager, or with no write at all when it already matches. Returns the live object.
pub async fn ensure<K>(api: &Api<K>, desired: K, owner_uid: Option<&str>) -> Result<(K, Outcome), ApplyError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let (live, outcome, _previous) = ensure_tracked(api, desired, owner_uid).await?;
    Ok((live, outcome))
}

/// [`ensure`], also returning the object as it was before an update (for Events that say
/// what changed).
pub async fn ensure_tracked<K>(
    api: &Api<K>,
    mut desired: K,
    owner_uid: Option<&str>,
) -> Result<(K, Outcome, Option<K>), ApplyError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let kind = K::kind(&()).into_owned();
    let name = desired.name_any();
    let api_err = |source| ApplyError::Api {
        kind: kind.clone(),
        name: name.clone(),
        source,
    };
    stamp(&mut desired).map_err(|source| ApplyError::Serialize {
        kind: kind.clone(),
        source,
    })?;
    let live = api.get_opt(&name).await.map_err(api_err)?;
    let outcome = match &live {
        None => Outcome::Created,
        Some(live) => {
            if !owned_by(live, owner_uid) {
                return Err(ApplyError::NotOwned { kind, name });
            }
            let want = serde_json::to_value(&desired);
            let have = serde_json::to_value(live);
            match (want, have) {
                (Ok(want), Ok(have)) if is_subset(&want, &have) => Outcome::Unchanged,
                _ => Outcome::Updated,
            }
        }
    };
    if let (Outcome::Unchanged, Some(live)) = (outcome, &live) {
        tracing::debug!(%kind, %name, "up to date");
        return Ok((live.clone(), outcome, None));
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api
        .patch(&name, &params, &Patch::Apply(&desired))
        .await
        .map_err(api_err)?;
    tracing::info!(%kind, %name, outcome = outcome.as_str(), "applied");
    Ok((applied, outcome, live))
}

/// Creates `desired` unless an object with its name exists, which is left exactly as it is
/// (never read, never overwritten): for Secrets, whose contents the operator must not need
/// permission to read.
pub async fn create_if_absent<K>(api: &Api<K>, desired: &K) -> Result<Outcome, ApplyError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let kind = K::kind(&()).into_owned();
    let name = desired.name_any();
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    match api.create(&params, desired).await {
        Ok(_) => {
            tracing::info!(%kind, %name, "created");
            Ok(Outcome::Created)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(Outcome::Unchanged),
        Err(source) => Err(ApplyError::Api { kind, name, source }),
    }
}

/// Deletes the object named `name` if it exists and this pool owns it. Objects owned by
/// others are left alone.
pub async fn ensure_absent<K>(api: &Api<K>, name: &str, owner_uid: Option<&str>) -> Result<Outcome, ApplyError>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    let kind = K::kind(&()).into_owned();
    let api_err = |source| ApplyError::Api {
        kind: kind.clone(),
        name: name.to_owned(),
        source,
    };
    match api.get_opt(name).await.map_err(api_err)? {
        Some(live) if owner_uid.is_some() && owned_by(&live, owner_uid) => {
            api.delete(name, &DeleteParams::background()).await.map_err(api_err)?;
            tracing::info!(%kind, %name, "deleted unwanted object");
            Ok(Outcome::Deleted)
        }
        _ => Ok(Outcome::Absent),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    use super::*;

    #[test]
    fn subset_ignores_fields_the_server_adds() {
        let want = json!({"spec": {"ports": [{"port": 1}], "selector": {"a": "b"}}});
        let have = json!({"spec": {"ports": [{"port": 1, "protocol": "TCP"}], "selector": {"a": "b"},
                          "clusterIP": "None"}, "status": {}});
        assert!(is_subset(&want, &have));
    }

    #[test]
    fn subset_sees_changed_values_and_list_lengths() {
        let want = json!({"spec": {"replicas": 3, "args": ["--a", "--b"]}});
        assert!(!is_subset(
            &want,
            &json!({"spec": {"replicas": 2, "args": ["--a", "--b"]}})
        ));
        assert!(!is_subset(&want, &json!({"spec": {"replicas": 3, "args": ["--a"]}})));
        assert!(!is_subset(
            &want,
            &json!({"spec": {"replicas": 3, "args": ["--a", "--b", "--c"]}})
        ));
        assert!(!is_subset(&want, &json!({"spec": {"args": ["--a", "--b"]}})));
    }

    #[test]
    fn resource_quantities_compare_by_value() {
        let want = json!({"resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}}});
        let canonical = json!({"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}});
        assert!(is_subset(&want, &canonical));
        let changed = json!({"resources": {"requests": {"cpu": "600m", "memory": "1Gi"}}});
        assert!(!is_subset(&want, &changed));
        // Outside resources, strings are compared as written.
        assert!(!is_subset(
            &json!({"labels": {"a": "0.5"}}),
            &json!({"labels": {"a": "500m"}})
        ));
    }

    #[test]
    fn empty_desired_values_match_missing_fields() {
        let want = json!({"spec": {"egress": [], "ingress": [], "emptyDir": {}}});
        assert!(is_subset(&want, &json!({"spec": {}})));
        assert!(!is_subset(
            &json!({"spec": {"egress": []}}),
            &json!({"spec": {"egress": [{"to": []}]}})
        ));
    }

    #[test]
    fn false_matches_a_missing_field_only_where_the_server_omits_false() {
        // What a real API server returns for the operator's Service and pod spec.
        assert!(is_subset(
            &json!({"spec": {"publishNotReadyAddresses": false, "hostNetwork": false, "hostPID": false, "hostIPC": false}}),
            &json!({"spec": {}})
        ));
        assert!(!is_subset(
            &json!({"spec": {"hostNetwork": false}}),
            &json!({"spec": {"hostNetwork": true}})
        ));
        // A pointer bool the server would have kept: missing means someone removed it.
        assert!(!is_subset(
            &json!({"spec": {"automountServiceAccountToken": false}}),
            &json!({"spec": {}})
        ));
    }

    #[test]
    fn stamp_is_stable_and_sensitive() {
        let mut a = ConfigMap::default();
        a.metadata.name = Some("x".to_owned());
        let mut b = a.clone();
        stamp(&mut a).expect("serializes");
        stamp(&mut b).expect("serializes");
        let hash = |c: &ConfigMap| c.annotations().get(APPLIED_HASH_ANNOTATION).cloned();
        assert_eq!(hash(&a), hash(&b));
        let before = hash(&a);
        stamp(&mut a).expect("serializes");
        assert_eq!(hash(&a), before, "restamping ignores the old hash");
        b.data = Some([("k".to_owned(), "v".to_owned())].into());
        stamp(&mut b).expect("serializes");
        assert_ne!(hash(&a), hash(&b));
        assert_eq!(before.map(|h| h.len()), Some(16));
    }
}
