//! The pool's PodDisruptionBudget.

use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::child_meta;
use crate::labels;
use crate::resolve::ResolvedPool;

/// Limits how many executors node drains may take down at once, so a pool keeps serving
/// through cluster maintenance. `None` when the pool disabled its budget.
pub fn disruption_budget(pool: &ResolvedPool) -> Option<PodDisruptionBudget> {
    let max_unavailable = pool.max_unavailable.clone()?;
    Some(PodDisruptionBudget {
        metadata: child_meta(pool),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(max_unavailable),
            // A pod that is not ready serves nobody; keeping it must never block a drain.
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".to_owned()),
            selector: Some(LabelSelector {
                match_labels: Some(labels::selector_labels(&pool.name)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}
