//! Judging: a verdict for a completion against a benchmark's tests.
//!
//! - [`extract`]: code from a Markdown completion.
//! - [`program`]: the program and per-test expectations for a request.
//! - [`compare`]: how outputs are compared.
//! - [`build`]: compile once, then a fresh work dir per test.
//! - [`evaluate`]: the [`Judge`]: runs tests in parallel and decides verdicts.
//! - [`stream`]: many requests on one stream, answered as each finishes.

pub mod build;
pub mod compare;
pub mod evaluate;
pub mod extract;
pub mod humaneval_x;
pub mod program;
pub mod stream;
#[cfg(test)]
mod tests;

pub use evaluate::Judge;
