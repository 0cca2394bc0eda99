//! Sandpool's executor: compiles and runs untrusted code in sandboxes and
//! serves it over gRPC and HTTP.
//!
//! Layers, each using only those above it (`scripts/check-layers.py` keeps the
//! modules free of import circles):
//!
//! 1. Leaves, shared by everything below (they use nothing of the crate but each other):
//!    - [`tenants`]: who is calling (by token) and on what terms: weight, caps, priorities.
//!    - [`admission`]: run slots and per-tenant wait queues served by fair share.
//!    - [`error`]: the request error ([`error::ExecError`]) and host-path scrubbing.
//!    - [`task`]: request work off the runtime ([`task::blocking`]) and within its deadline ([`task::until`]).
//!    - [`languages`]: the language table (data, not code) and a run's environment.
//!    - [`limits`]: defaults, ceilings, minimums and per-request resolution.
//!    - [`verdict`]: from what a run did to a verdict.
//!    - [`metrics`]: Prometheus metrics.
//!    - [`budget`]: one budget of bytes held for callers at once (request bodies, replies' files).
//!    - [`call`]: what the transport knows about a call: deadline, caller, its budget charge.
//!    - [`validate`]: caps on a request's shape (paths, files, args, fetches).
//!    - [`shared`]: artifacts built once that a language's runs share read-only (precompiled headers).
//!    - [`watchdog`]: stuck runs, run slots held past their allowance and blocking-pool work turn liveness NOT_SERVING; a wedged runtime or an unheeded SIGTERM ends the process.
//! 2. The engine and its parts:
//!    - [`probe`]: what works here (languages, their packages), asked in the sandbox at start-up.
//!    - [`fetch`]: files read out of a work dir for a reply, capped and charged.
//!    - [`result_cache`]: opt-in answers to identical requests without running them.
//!    - [`capture`]: opt-in on-disk record of requests with chosen verdicts.
//!    - [`engine`]: the above put together to execute requests ([`Engine`]).
//! 3. What runs on the engine:
//!    - [`judge`]: verdicts for completions against tests (Evaluate).
//!    - [`session`]: stateful sessions, a sandbox whose /work lives across calls.
//! 4. API adapters:
//!    - [`service`] and [`server`]: the thin gRPC layer, health, reflection, draining.
//!    - [`http`]: the SandboxFusion/ScaleBox-compatible HTTP API.
//!    - [`auth`]: the optional bearer token callers present.
//!    - [`config`]: flags and environment.
//!
//! [`sandbox`] re-exports the `sandpool-sandbox` crate (isolation and limits for one
//! run, behind its `Runner` trait).

pub mod admission;
pub mod auth;
pub mod budget;
pub mod call;
pub mod capture;
pub mod config;
pub mod engine;
pub mod error;
#[cfg(test)]
pub(crate) mod fake_runner;
pub mod fetch;
pub mod http;
pub mod judge;
pub mod languages;
pub mod limits;
pub mod metrics;
pub mod probe;
pub mod result_cache;
pub use sandpool_sandbox as sandbox;
pub mod server;
pub mod service;
pub mod session;
pub mod shared;
pub mod task;
pub mod tenants;
pub mod validate;
pub mod verdict;
pub mod watchdog;

pub use engine::Engine;
pub use sandpool_proto::v1 as proto;
