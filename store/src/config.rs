//! Where the store keeps blobs and on what terms, and the backend built from it.

use crate::crypt::Sealer;
use crate::error::StoreError;
use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The backend.
#[derive(Debug, Clone)]
pub enum Backend {
    /// A local directory (the embedded default; a PVC in Kubernetes). Created if missing.
    Dir(PathBuf),
    /// S3-compatible object storage.
    S3(S3Config),
}

/// An S3-compatible bucket and how to reach it.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// `http(s)://host:port`; unset: AWS's endpoint for `region`.
    pub endpoint: Option<String>,
    pub bucket: String,
    pub region: String,
    /// A directory holding `access_key_id` and `secret_access_key` files (a Secret's mount);
    /// unset: `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY` from the environment.
    pub credentials_dir: Option<PathBuf>,
}

/// The store's configuration.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub backend: Backend,
    /// Keys below this prefix (`/`-separated segments; empty: the root).
    pub prefix: String,
    /// The key file: blobs are sealed with it. Required for S3 (a shared store).
    pub key_file: Option<PathBuf>,
    /// Largest blob, bytes before sealing.
    pub max_blob_bytes: u64,
    /// Bytes one tenant's blobs may hold in all, as stored.
    pub tenant_quota_bytes: u64,
    /// How long one backend call (a head, a list, a part of a blob streaming in or out) may
    /// go unanswered before the store gives up on it ([`crate::StoreError::TimedOut`]).
    pub timeout: std::time::Duration,
}

impl StoreConfig {
    /// Refuses a configuration that cannot work, without touching a file or the network.
    pub fn check(&self) -> Result<(), StoreError> {
        for seg in self.prefix.split('/').filter(|s| !s.is_empty()) {
            crate::key::check_id("prefix", seg)?;
        }
        if let Backend::S3(s3) = &self.backend {
            if self.key_file.is_none() {
                return Err(StoreError::Config(
                    "an S3 store is shared: --session-store-key-file is required to encrypt it at rest".into(),
                ));
            }
            if s3.bucket.is_empty() {
                return Err(StoreError::Config("--session-store-s3-bucket is empty".into()));
            }
        }
        Ok(())
    }

    /// The backend and sealer this configuration names. Reads the key and credential files.
    pub(crate) fn open(&self) -> Result<(Arc<dyn ObjectStore>, Option<Sealer>), StoreError> {
        self.check()?;
        let sealer = self.key_file.as_deref().map(Sealer::from_file).transpose()?;
        let store: Arc<dyn ObjectStore> = match &self.backend {
            Backend::Dir(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| StoreError::Config(format!("--session-store-dir {}: {e}", dir.display())))?;
                Arc::new(LocalFileSystem::new_with_prefix(dir)?.with_automatic_cleanup(true))
            }
            Backend::S3(s3) => Arc::new(s3_store(s3)?),
        };
        Ok((store, sealer))
    }
}

fn s3_store(s3: &S3Config) -> Result<object_store::aws::AmazonS3, StoreError> {
    install_tls_provider();
    let mut b = AmazonS3Builder::new()
        .with_bucket_name(&s3.bucket)
        .with_region(&s3.region);
    let (id, secret) = match &s3.credentials_dir {
        Some(dir) => (
            read_secret(dir, "access_key_id")?,
            read_secret(dir, "secret_access_key")?,
        ),
        None => (env_secret("AWS_ACCESS_KEY_ID")?, env_secret("AWS_SECRET_ACCESS_KEY")?),
    };
    b = b.with_access_key_id(id).with_secret_access_key(secret);
    if let Some(endpoint) = &s3.endpoint {
        // Path-style requests to the endpoint; plain HTTP only where the endpoint says so.
        b = b
            .with_endpoint(endpoint)
            .with_virtual_hosted_style_request(false)
            .with_allow_http(endpoint.starts_with("http://"));
    }
    Ok(b.build()?)
}

fn read_secret(dir: &Path, name: &str) -> Result<String, StoreError> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| StoreError::Config(format!("--session-store-s3-credentials-dir: {}: {e}", path.display())))?;
    Ok(text.trim().to_owned())
}

fn env_secret(name: &str) -> Result<String, StoreError> {
    std::env::var(name).map_err(|_| {
        StoreError::Config(format!(
            "{name} is not set (or set --session-store-s3-credentials-dir to a Secret's mount)"
        ))
    })
}

/// reqwest is built without a crypto provider of its own (the `aws` feature's aws-lc-rs is a C
/// build); ring, which the workspace's other TLS uses, is the process's default.
fn install_tls_provider() {
    // Err: one is installed already (by us or another client), which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
