//! The PodDisruptionBudget's `maxUnavailable`: a count or percentage that still lets nodes
//! drain.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::invalid::InvalidSpec;
use crate::crd::DisruptionBudget;

/// Why a zero budget is refused.
const ZERO_BUDGET: &str = "0 would block every node drain forever; disable the budget (enabled: false) instead";

fn check_max_unavailable(value: &IntOrString) -> Result<(), InvalidSpec> {
    let field = "spec.disruptionBudget.maxUnavailable";
    match value {
        IntOrString::Int(n) if *n > 0 => Ok(()),
        IntOrString::Int(0) => Err(InvalidSpec::new(field, ZERO_BUDGET)),
        IntOrString::Int(_) => Err(InvalidSpec::new(field, "must not be negative")),
        IntOrString::String(s) if s.strip_suffix('%').and_then(|n| n.parse::<u8>().ok()) == Some(0) => {
            Err(InvalidSpec::new(field, ZERO_BUDGET))
        }
        IntOrString::String(s) => {
            let ok = s
                .strip_suffix('%')
                .and_then(|n| n.parse::<u8>().ok())
                .is_some_and(|n| n <= 100);
            if ok {
                Ok(())
            } else {
                Err(InvalidSpec::new(
                    field,
                    format!("{s:?} is neither a count nor a percentage like 25%"),
                ))
            }
        }
    }
}

/// The budget's `maxUnavailable` (1 by default), or `None` when the pool disables it.
pub(super) fn max_unavailable(spec: Option<&DisruptionBudget>) -> Result<Option<IntOrString>, InvalidSpec> {
    let budget = spec.cloned().unwrap_or_default();
    if budget.enabled == Some(false) {
        return Ok(None);
    }
    let value = budget.max_unavailable.unwrap_or(IntOrString::Int(1));
    check_max_unavailable(&value)?;
    Ok(Some(value))
}
