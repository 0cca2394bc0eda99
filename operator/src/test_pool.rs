//! The pool most unit tests start from: `evals/python` with a uid (so it owns its children)
//! and the spec under test.

use serde_json::{Value, json};

use crate::crd::SandboxPool;

/// A stored pool named `python` in namespace `evals`, with `spec`.
pub(crate) fn pool(spec: Value) -> SandboxPool {
    serde_json::from_value(json!({
        "apiVersion": "sandpool.dev/v1alpha1",
        "kind": "SandboxPool",
        "metadata": {"name": "python", "namespace": "evals", "uid": "u-1"},
        "spec": spec,
    }))
    .expect("test pool deserializes")
}
