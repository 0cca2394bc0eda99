//! The one error of resolving: the field the operator cannot honour, and why.

/// A spec the schema admitted but the operator cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidSpec {
    /// Path of the offending field, e.g. `spec.limits.wallTime`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl InvalidSpec {
    pub(super) fn new(field: impl Into<String>, message: impl ToString) -> Self {
        Self {
            field: field.into(),
            message: message.to_string(),
        }
    }
}
