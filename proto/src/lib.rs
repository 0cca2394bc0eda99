//! Sandpool's gRPC contract, package `sandpool.v1`, generated from `proto/sandpool/v1`.

/// Generated messages, client and server for `sandpool.v1`.
pub mod v1 {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("sandpool.v1");

    /// Encoded `FileDescriptorSet` of the package, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/sandpool_descriptor.bin"));
}

pub use v1::*;
