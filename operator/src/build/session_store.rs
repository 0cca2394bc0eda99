//! `spec.sessions`' store and auto-pause on the executor: its flags, and the PVC or Secret
//! volumes they name.

use k8s_openapi::api::core::v1::{
    KeyToPath, PersistentVolumeClaimVolumeSource, SecretVolumeSource, Volume, VolumeMount,
};

use crate::resolve::{ResolvedPool, ResolvedSessions, StoreBackend};

/// Where a PVC store is mounted (outside the work root, whose emptyDir goes with the pod).
pub const SESSION_STORE_DIR: &str = "/var/lib/sandpool-session-store";
/// Where an S3 store's credentials Secret is mounted (`access_key_id`, `secret_access_key`).
/// Runs never see it: `namespaces` mode (the only one serving sessions) gives them a root of
/// their own.
pub const S3_CREDENTIALS_DIR: &str = "/etc/sandpool/session-store-s3";
/// Where the store's encryption key is mounted, as the file [`STORE_KEY_FILE`].
pub const STORE_KEY_DIR: &str = "/etc/sandpool/session-store-key";
/// The key's file name in [`STORE_KEY_DIR`].
pub const STORE_KEY_FILE: &str = "key";
/// The keys an S3 credentials Secret must hold, mounted as files of the same names.
pub const S3_CREDENTIAL_KEYS: [&str; 2] = ["access_key_id", "secret_access_key"];

const STORE_VOLUME: &str = "session-store";
const S3_CREDENTIALS_VOLUME: &str = "session-store-s3";
const KEY_VOLUME: &str = "session-store-key";

/// The sessions a pool serves, if any (a store means nothing to a pool without them).
fn serving(pool: &ResolvedPool) -> Option<&ResolvedSessions> {
    pool.sessions.as_ref().filter(|s| s.max_per_pod > 0)
}

/// The executor's auto-pause and `--session-store-*` flags.
pub(super) fn args(pool: &ResolvedPool) -> Vec<String> {
    let Some(sessions) = serving(pool) else {
        return Vec::new();
    };
    let mut args = Vec::new();
    if let Some(ms) = sessions.pause_after_idle_ms {
        args.push(format!("--session-pause-after-idle-ms={ms}"));
    }
    let store = &sessions.store;
    match &store.backend {
        StoreBackend::PodLocal => {}
        StoreBackend::Pvc { .. } => args.push(format!("--session-store-dir={SESSION_STORE_DIR}")),
        StoreBackend::S3 {
            bucket,
            endpoint,
            region,
            prefix,
            ..
        } => {
            args.push(format!("--session-store-s3-bucket={bucket}"));
            if let Some(endpoint) = endpoint {
                args.push(format!("--session-store-s3-endpoint={endpoint}"));
            }
            if let Some(region) = region {
                args.push(format!("--session-store-s3-region={region}"));
            }
            args.push(format!("--session-store-s3-credentials-dir={S3_CREDENTIALS_DIR}"));
            if let Some(prefix) = prefix {
                args.push(format!("--session-store-prefix={prefix}"));
            }
        }
    }
    if store.encryption_key.is_some() {
        args.push(format!("--session-store-key-file={STORE_KEY_DIR}/{STORE_KEY_FILE}"));
    }
    let optional = [
        ("--session-store-blob-bytes", store.max_blob_bytes),
        ("--session-store-tenant-bytes", store.tenant_quota_bytes),
        ("--session-store-ttl-secs", store.ttl_secs),
    ];
    for (flag, value) in optional {
        if let Some(value) = value {
            args.push(format!("{flag}={value}"));
        }
    }
    args
}

/// The PVC, credentials and key volumes.
pub(super) fn volumes(pool: &ResolvedPool) -> Vec<Volume> {
    let Some(sessions) = serving(pool) else {
        return Vec::new();
    };
    let store = &sessions.store;
    let mut volumes = Vec::new();
    match &store.backend {
        StoreBackend::PodLocal => {}
        StoreBackend::Pvc { claim_name } => volumes.push(Volume {
            name: STORE_VOLUME.to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name.clone(),
                // Unset, not false: the API server drops a false, and a field it drops would
                // make every reconcile look like a change.
                read_only: None,
            }),
            ..Default::default()
        }),
        StoreBackend::S3 { credentials_secret, .. } => volumes.push(secret_volume(
            S3_CREDENTIALS_VOLUME,
            credentials_secret,
            S3_CREDENTIAL_KEYS.iter().map(|k| (*k, *k)),
        )),
    }
    if let Some(key) = &store.encryption_key {
        volumes.push(secret_volume(
            KEY_VOLUME,
            &key.name,
            [(key.key.as_str(), STORE_KEY_FILE)],
        ));
    }
    volumes
}

/// Where [`volumes`] are mounted in the executor container.
pub(super) fn volume_mounts(pool: &ResolvedPool) -> Vec<VolumeMount> {
    let Some(sessions) = serving(pool) else {
        return Vec::new();
    };
    let store = &sessions.store;
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..Default::default()
    };
    let mut mounts = Vec::new();
    match &store.backend {
        StoreBackend::PodLocal => {}
        StoreBackend::Pvc { .. } => mounts.push(mount(STORE_VOLUME, SESSION_STORE_DIR, false)),
        StoreBackend::S3 { .. } => mounts.push(mount(S3_CREDENTIALS_VOLUME, S3_CREDENTIALS_DIR, true)),
    }
    if store.encryption_key.is_some() {
        mounts.push(mount(KEY_VOLUME, STORE_KEY_DIR, true));
    }
    mounts
}

/// A Secret volume with `items` (Secret key, file name), owner-only like the auth token's.
/// Not optional: without its key or credentials the executor cannot pause a session, so the
/// pod waits (the kubelet's FailedMount Event names the Secret) rather than start and lose
/// every session at its first pause.
fn secret_volume<'a>(name: &str, secret: &str, items: impl IntoIterator<Item = (&'a str, &'a str)>) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            default_mode: Some(0o400),
            items: Some(
                items
                    .into_iter()
                    .map(|(key, path)| KeyToPath {
                        key: key.to_owned(),
                        path: path.to_owned(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            optional: Some(false),
        }),
        ..Default::default()
    }
}
