//! What `restricted` isolation mode refuses: anything that would loosen its pod's
//! confinement.

use std::collections::BTreeMap;

use super::invalid::InvalidSpec;
use crate::crd::SandboxPoolSpec;

/// Pod annotations that set a container's AppArmor or seccomp profile (the pre-field
/// spellings, which the kubelet and Pod Security admission still read for AppArmor).
pub const SECURITY_ANNOTATION_PREFIXES: [&str; 3] = [
    "container.apparmor.security.beta.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/pod",
];

/// What `restricted` mode cannot honour. Its pod must stay inside Pod Security "restricted"
/// and keep the confinement the executor adds, so nothing in the spec may loosen either.
/// The CRD offers no volumes, host options or identities, so these are the only ways in.
/// Nor may it ask for sessions, which restricted executors refuse.
pub(super) fn check_restricted(spec: &SandboxPoolSpec, from_default: bool) -> Result<(), InvalidSpec> {
    let mode = if from_default {
        "isolation mode restricted (the operator's --default-isolation)"
    } else {
        "isolation mode restricted"
    };
    if spec.gpu.is_some() {
        return Err(InvalidSpec::new(
            "spec.gpu",
            format!(
                "GPU pools need isolation mode namespaces: {mode} gives runs no GPU devices; set spec.isolation.mode: namespaces"
            ),
        ));
    }
    // The CRD refuses this when the pool names the mode; here for the operator's default
    // mode, and for pools stored before that rule (a condition and an Event say so).
    if spec.sessions.as_ref().is_some_and(|s| s.max_per_pod > 0) {
        return Err(InvalidSpec::new(
            "spec.sessions",
            format!(
                "{mode} serves no sessions: its runs share one uid, so a session's files and processes could not be kept from other runs (the executor refuses every session there); leave spec.sessions out, set maxPerPod: 0, or set spec.isolation.mode: namespaces"
            ),
        ));
    }
    let annotations = spec.pod_template.as_ref().and_then(|t| t.annotations.as_ref());
    if let Some(key) = annotations
        .into_iter()
        .flat_map(BTreeMap::keys)
        .find(|k| SECURITY_ANNOTATION_PREFIXES.iter().any(|p| k.starts_with(p)))
    {
        return Err(InvalidSpec::new(
            format!("spec.podTemplate.annotations[{key:?}]"),
            format!(
                "sets a seccomp or AppArmor profile, which {mode} fixes (RuntimeDefault seccomp; Pod Security \"restricted\" refuses an unconfined one)"
            ),
        ));
    }
    Ok(())
}
