//! Sandpool gateway: the HTTP front door of a pool.
//!
//! A ClusterIP Service balances per connection, so one keep-alive client sticks to one
//! executor; the gateway spreads per request. Session-bound requests go to the executor
//! whose name their session id carries (or the one it moved to, when that executor is gone:
//! another live one resumes it from the shared store); the rest go to the executor with the fewest
//! outstanding requests, and to another only when the first refused them unrun
//! (docs/gateway.md).

/// The backend set, swapped whole on change, and the least-outstanding choice.
pub mod backends;
/// Request bodies kept for a retry when small, streamed through otherwise.
pub mod body;
/// Flags with environment fallbacks, and the backend source they name.
pub mod config;
/// Backends from a Service's EndpointSlices (kube watcher).
pub mod discovery;
/// E2B's list over the whole pool: every executor asked, the answers merged and paged.
pub mod list;
/// Prometheus metrics.
pub mod metrics;
/// Sessions that moved to another executor (after a drain), learned from answers.
pub mod moved;
/// Forwarding one request: routing, retry decision, hop-by-hop headers, error answers.
pub mod proxy;
/// The accept loop, the metrics and probe endpoints, draining, and `run`.
pub mod serve;
/// Session ids (`<32 hex>-<pod name>`) and where requests carry them.
pub mod session;

pub use config::Args;
pub use serve::{GatewayError, run};
