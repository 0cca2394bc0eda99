//! What the operator's flags decide about every pool: defaults for what a spec leaves unset,
//! and the policy no spec can override. `run` and `render` build one from the same flags;
//! [`crate::plan`] reads both halves, so neither caller repeats "resolve, then check policy".

use crate::defaults::PoolDefaults;
use crate::policy::Policy;

/// The operator's settings for pools (from `run`/`render` flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorConfig {
    /// Fills in what a pool's spec leaves unset.
    pub defaults: PoolDefaults,
    /// What pools may use, whatever their spec says.
    pub policy: Policy,
}
