//! What the operator does with one pool, decided without a cluster: the children to apply,
//! or why it will not act. `reconcile` applies a plan and `render` prints it, so the two
//! cannot disagree about what a pool gets or which pools are refused.
//!
//! The namespace part of the policy is not planned here: it needs the namespace's labels
//! from the API server, so `reconcile` checks it first (and `render` has no cluster to ask).

use crate::build::{self, Children};
use crate::config::OperatorConfig;
use crate::crd::SandboxPool;
use crate::resolve::{self, InvalidSpec, ResolvedPool};
use crate::status;

/// A pool the operator will act on.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The spec, checked and defaulted (the status and the auth Secret are made from it).
    pub pool: ResolvedPool,
    /// The objects the pool gets.
    pub children: Children,
}

/// Why the operator will not act on a pool. Its existing children are left alone (the last
/// good spec keeps serving); the status and an Event name the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The spec cannot be honoured.
    #[error("invalid spec: {0}")]
    InvalidSpec(#[source] InvalidSpec),
    /// The operator's policy refuses what the spec asks for.
    #[error("refused by the operator's policy: {0}")]
    PolicyRefused(#[source] InvalidSpec),
}

impl Refusal {
    /// The condition and Event reason it is reported with.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::InvalidSpec(_) => status::INVALID_SPEC,
            Refusal::PolicyRefused(_) => status::POLICY_REFUSED,
        }
    }

    /// The refused field and why.
    pub fn why(&self) -> &InvalidSpec {
        match self {
            Refusal::InvalidSpec(why) | Refusal::PolicyRefused(why) => why,
        }
    }
}

/// Plans one pool: resolves its spec against the defaults, checks the result against the
/// policy, and builds the children. `namespace` is used when the pool carries none
/// (rendering a file).
pub fn plan(pool: &SandboxPool, config: &OperatorConfig, namespace: &str) -> Result<Plan, Refusal> {
    let defaults = &config.defaults;
    let resolved = resolve::resolve(pool, defaults, namespace).map_err(Refusal::InvalidSpec)?;
    let spec_runtime_class = pool
        .spec
        .isolation
        .as_ref()
        .and_then(|i| i.runtime_class_name.as_deref());
    config
        .policy
        .check(
            &resolved,
            spec_runtime_class,
            &defaults.executor_image,
            defaults.runtime_class_name.as_deref(),
        )
        .map_err(Refusal::PolicyRefused)?;
    if let Some(gateway) = &resolved.gateway {
        config
            .policy
            .check_gateway_image(&gateway.image, &defaults.gateway_image)
            .map_err(Refusal::PolicyRefused)?;
    }
    let children = build::children(&resolved);
    Ok(Plan {
        pool: resolved,
        children,
    })
}

#[cfg(test)]
mod tests;
