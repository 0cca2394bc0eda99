//! Sandpool's store for paused sessions and snapshots (docs/sessions.md, "The session store").
//!
//! Blobs are opaque: the archive of a session's `/work` and interpreter state is made and
//! restored by code inside the sandbox; this crate never parses what a session wrote. It
//! keeps them per tenant, streaming, bounded and, where a key is set, sealed.
//!
//! - [`key`]: what a blob is stored under ([`BlobKey`]: tenant, kind, id), checked.
//! - [`meta`]: what is recorded beside a blob ([`Meta`]: size, created, TTL, mode, session).
//! - [`crypt`]: encryption at rest, chunked so it streams ([`Sealer`]).
//! - [`quota`]: bytes being stored per tenant, counted against its quota as they stream.
//! - [`config`]: the backends (a local directory, S3-compatible storage) and limits.
//! - [`store`]: put, get, delete, delete by session, the TTL sweep ([`Store`]).
//! - [`error`]: what a call can fail with ([`StoreError`]).

pub mod config;
pub mod crypt;
pub mod error;
pub mod key;
pub mod meta;
mod quota;
pub mod store;

pub use config::{Backend, S3Config, StoreConfig};
pub use crypt::Sealer;
pub use error::StoreError;
pub use key::{BlobKey, Kind};
pub use meta::{Meta, Mode, PutOptions};
pub use store::{Store, SweepReport};
