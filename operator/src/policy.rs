//! Operator-wide policy that pool authors cannot override: which images, runtime classes,
//! tolerations, node selectors and namespaces a `SandboxPool` may use.
//!
//! "May create a SandboxPool" must not become "may run any image with the executor's
//! capabilities on any node": the executor pods hold SYS_ADMIN and run unconfined by
//! seccomp/AppArmor in `namespaces` mode, so the image is trusted code, and which node it
//! lands on matters. A refused pool gets no children; its status and an Event name the field.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, Toleration};

use crate::resolve::{InvalidSpec, ResolvedPool};

/// Taint and label keys of control-plane nodes.
pub const CONTROL_PLANE_KEYS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// The operator's policy (from `run`/`render` flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Image patterns pools may use: an exact reference, a repository (matching its tags and
    /// digests), or a prefix ending in `/` (a registry or repository path). `*` allows any.
    /// Empty: the operator's own executor image repository only.
    pub allowed_images: Vec<String>,
    /// RuntimeClasses a pool may name instead of the operator's default (`*`: any). A pool
    /// can leave the default only for one of these. With no default and an empty list,
    /// pools may name any class (there is no default to drop).
    pub allowed_runtime_classes: Vec<String>,
    /// Toleration keys pools may use (exact, or a prefix ending in `/`; `*`: any key).
    /// Empty: any key except control-plane taints. Control-plane keys must be listed
    /// exactly to be allowed.
    pub allowed_toleration_keys: Vec<String>,
    /// Allow tolerations with no key (`operator: Exists` tolerating every taint).
    pub allow_wildcard_tolerations: bool,
    /// Node label keys pools may select on (nodeSelector and node affinity), as for
    /// tolerations. Empty: any key except control-plane roles.
    pub allowed_node_selector_keys: Vec<String>,
    /// Namespaces whose pools the operator manages; empty: all it watches.
    pub namespaces: Vec<String>,
    /// Label selector (`k=v`, `k!=v`, `k`, comma-separated) namespaces must match; empty: all.
    pub namespace_selector: Option<String>,
}

/// Why a pool is refused, as a field and message (reported like an invalid spec).
pub type Refusal = InvalidSpec;

fn refuse(field: impl Into<String>, message: impl Into<String>) -> Refusal {
    InvalidSpec {
        field: field.into(),
        message: message.into(),
    }
}

/// The repository part of an image reference (no tag, no digest).
pub fn repository(image: &str) -> &str {
    let no_digest = image.split('@').next().unwrap_or(image);
    match no_digest.rfind(':') {
        Some(colon) if colon > no_digest.rfind('/').unwrap_or(0) => &no_digest[..colon],
        _ => no_digest,
    }
}

/// Whether `image` matches `pattern` (see [`Policy::allowed_images`]).
pub fn image_matches(pattern: &str, image: &str) -> bool {
    if pattern == "*" || image == pattern {
        return true;
    }
    if pattern.ends_with('/') {
        return image.starts_with(pattern);
    }
    // A repository matches its own tags and digests, never `repo-evil` or `repo/sub`.
    image
        .strip_prefix(pattern)
        .is_some_and(|rest| rest.starts_with(':') || rest.starts_with('@'))
}

fn key_allowed(list: &[String], key: &str) -> bool {
    let control_plane = CONTROL_PLANE_KEYS.contains(&key);
    if list.is_empty() {
        return !control_plane;
    }
    list.iter()
        .any(|p| p == key || (!control_plane && (p == "*" || (p.ends_with('/') && key.starts_with(p.as_str())))))
}

impl Policy {
    /// Checks a resolved pool against the policy. `default_image` and
    /// `default_runtime_class` are the operator's own defaults.
    pub fn check(
        &self,
        pool: &ResolvedPool,
        spec_runtime_class: Option<&str>,
        default_image: &str,
        default_runtime_class: Option<&str>,
    ) -> Result<(), Refusal> {
        self.check_image(&pool.image, default_image)?;
        // With no default there is nothing to drop: any class is allowed unless listed ones
        // narrow it. With a default, only it and the listed ones.
        let open = default_runtime_class.is_none() && self.allowed_runtime_classes.is_empty();
        if let Some(class) = spec_runtime_class
            && !open
            && Some(class) != default_runtime_class
            && !self.allowed_runtime_classes.iter().any(|c| c == "*" || c == class)
        {
            return Err(refuse(
                "spec.isolation.runtimeClassName",
                format!(
                    "{class:?} is not allowed by the operator's policy (default {}; allowed: {})",
                    default_runtime_class.map_or("none".to_owned(), |d| format!("{d:?}")),
                    list_or_none(&self.allowed_runtime_classes)
                ),
            ));
        }
        self.check_tolerations("spec.tolerations", &pool.tolerations)?;
        if let Some(gpu) = &pool.gpu {
            self.check_tolerations("spec.gpu.tolerations", &gpu.tolerations)?;
        }
        self.check_node_selector("spec.nodeSelector", &pool.node_selector)?;
        let affinity = pool.affinity.as_ref().and_then(|a| a.node_affinity.as_ref());
        if let Some(affinity) = affinity {
            let required = affinity
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flat_map(|r| r.node_selector_terms.iter());
            let preferred = affinity
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
                .map(|p| &p.preference);
            for term in required.chain(preferred) {
                self.check_term(term)?;
            }
        }
        Ok(())
    }

    /// A gateway image other than the operator's own runs with a token that may watch the
    /// namespace's EndpointSlices and sees every request: it must come from the repository
    /// of `default_gateway_image` (the operator's `--gateway-image`) or be an allowed image.
    pub fn check_gateway_image(&self, image: &str, default_gateway_image: &str) -> Result<(), Refusal> {
        let own = repository(default_gateway_image);
        if image_matches(own, image) || self.allowed_images.iter().any(|p| image_matches(p, image)) {
            return Ok(());
        }
        let mut allowed = vec![own.to_owned()];
        allowed.extend(self.allowed_images.iter().cloned());
        Err(refuse(
            "spec.gateway.image",
            format!(
                "{image:?} is not allowed by the operator's policy (allowed: {})",
                list_or_none(&allowed)
            ),
        ))
    }

    fn check_image(&self, image: &str, default_image: &str) -> Result<(), Refusal> {
        let default_pattern = [repository(default_image).to_owned()];
        let patterns = if self.allowed_images.is_empty() {
            &default_pattern[..]
        } else {
            &self.allowed_images[..]
        };
        if patterns.iter().any(|p| image_matches(p, image)) {
            Ok(())
        } else {
            Err(refuse(
                "spec.image",
                format!(
                    "{image:?} is not allowed by the operator's policy (allowed: {})",
                    list_or_none(patterns)
                ),
            ))
        }
    }

    fn check_tolerations(&self, field: &str, tolerations: &[Toleration]) -> Result<(), Refusal> {
        for (i, t) in tolerations.iter().enumerate() {
            let key = t.key.as_deref().unwrap_or_default();
            if key.is_empty() {
                if !self.allow_wildcard_tolerations {
                    return Err(refuse(
                        format!("{field}[{i}]"),
                        "a toleration without a key tolerates every taint, control-plane ones included; the operator's policy does not allow it",
                    ));
                }
                continue;
            }
            if !key_allowed(&self.allowed_toleration_keys, key) {
                return Err(refuse(
                    format!("{field}[{i}].key"),
                    format!("tolerating {key:?} is not allowed by the operator's policy"),
                ));
            }
        }
        Ok(())
    }

    fn check_node_selector(&self, field: &str, selector: &BTreeMap<String, String>) -> Result<(), Refusal> {
        match selector
            .keys()
            .find(|k| !key_allowed(&self.allowed_node_selector_keys, k))
        {
            Some(key) => Err(refuse(
                format!("{field}[{key:?}]"),
                "selecting nodes by this label is not allowed by the operator's policy",
            )),
            None => Ok(()),
        }
    }

    fn check_term(&self, term: &NodeSelectorTerm) -> Result<(), Refusal> {
        let keys = term
            .match_expressions
            .iter()
            .flatten()
            .chain(term.match_fields.iter().flatten())
            .map(|e| e.key.as_str());
        for key in keys {
            if !key_allowed(&self.allowed_node_selector_keys, key) {
                return Err(refuse(
                    "spec.affinity.nodeAffinity",
                    format!("selecting nodes by {key:?} is not allowed by the operator's policy"),
                ));
            }
        }
        Ok(())
    }

    /// Whether the namespace list alone decides (no selector to look up).
    pub fn needs_namespace_labels(&self) -> bool {
        self.namespace_selector.as_deref().is_some_and(|s| !s.trim().is_empty())
    }

    /// Checks the pool's namespace against the list and, given its labels, the selector.
    pub fn check_namespace(&self, namespace: &str, labels: &BTreeMap<String, String>) -> Result<(), Refusal> {
        if !self.namespaces.is_empty() && !self.namespaces.iter().any(|n| n == namespace) {
            return Err(refuse(
                "metadata.namespace",
                format!("the operator does not manage pools in namespace {namespace:?}"),
            ));
        }
        if let Some(selector) = self.namespace_selector.as_deref()
            && !selector_matches(selector, labels)
        {
            return Err(refuse(
                "metadata.namespace",
                format!("namespace {namespace:?} does not match the operator's namespace selector {selector:?}"),
            ));
        }
        Ok(())
    }
}

fn list_or_none(list: &[String]) -> String {
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

/// Equality-based label selector: `k=v`, `k==v`, `k!=v`, `k` (exists), `!k` (absent).
pub fn selector_matches(selector: &str, labels: &BTreeMap<String, String>) -> bool {
    selector.split(',').map(str::trim).filter(|s| !s.is_empty()).all(|req| {
        if let Some((k, v)) = req.split_once("!=") {
            labels.get(k.trim()).map(String::as_str) != Some(v.trim())
        } else if let Some((k, v)) = req.split_once("==").or_else(|| req.split_once('=')) {
            labels.get(k.trim()).map(String::as_str) == Some(v.trim())
        } else if let Some(k) = req.strip_prefix('!') {
            !labels.contains_key(k.trim())
        } else {
            labels.contains_key(req)
        }
    })
}

#[cfg(test)]
mod tests;
