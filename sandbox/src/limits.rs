//! The limits one run is held to.

use std::time::Duration;

/// Limits in force for one phase of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub wall: Duration,
    pub cpu: Duration,
    pub memory: u64,
    /// Per output stream.
    pub output: u64,
    /// Processes and threads together.
    pub processes: u32,
    pub file_size: u64,
}
