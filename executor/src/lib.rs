//! Sandpool's executor: compiles and runs untrusted code in sandboxes and
//! serves it over gRPC.
//!
//! - [`languages`]: the language table (data, not code).
//! - [`packages`]: what each language's programs can import, listed in the sandbox.
//! - [`sandbox`]: re-export of the `sandpool-sandbox` crate (isolation and limits for one run, behind its `Runner` trait).
//! - [`limits`]: defaults, ceilings, minimums and per-request resolution.
//! - [`validate`]: caps on a request's shape (paths, files, args, fetches).
//! - [`verdict`]: from what a run did to a verdict.
//! - [`admission`]: run slots and the wait queue.
//! - [`budget`]: one budget of bytes held for callers at once (request bodies, replies' files).
//! - [`call`]: what the transport knows about a call: deadline, caller, its budget charge.
//! - [`engine`]: the above put together to execute requests.
//! - [`fetch`]: files read out of a work dir for a reply, capped and charged.
//! - [`judge`]: verdicts for completions against tests (Evaluate).
//! - [`http`]: the SandboxFusion/ScaleBox-compatible HTTP API.
//! - [`session`]: stateful sessions, a sandbox whose /work lives across calls.
//! - [`service`] and [`server`]: the thin gRPC layer, health, reflection, draining.
//! - [`auth`]: the optional bearer token callers present.
//! - [`result_cache`]: opt-in answers to identical requests without running them.
//! - [`capture`]: opt-in on-disk record of requests with chosen verdicts.
//! - [`metrics`]: Prometheus metrics.
//! - [`watchdog`]: stuck runs turn liveness NOT_SERVING; a wedged runtime or an unheeded SIGTERM ends the process.
//! - [`config`]: flags and environment.

pub mod admission;
pub mod auth;
pub mod budget;
pub mod call;
pub mod capture;
pub mod config;
pub mod engine;
#[cfg(test)]
pub(crate) mod fake_runner;
pub mod fetch;
pub mod http;
pub mod judge;
pub mod languages;
pub mod limits;
pub mod metrics;
pub mod packages;
pub mod result_cache;
pub use sandpool_sandbox as sandbox;
pub mod server;
pub mod service;
pub mod session;
pub mod validate;
pub mod verdict;
pub mod watchdog;

pub use engine::Engine;
pub use sandpool_proto::v1 as proto;
