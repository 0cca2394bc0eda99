//! Tenants in the executor pods: the tenants file in a ConfigMap (names, shares and caps, no
//! token), and each tenant's token mounted from its Secret next to it.
//!
//! Both are mounted as whole directories, never with `subPath`, so the kubelet refreshes
//! them in running pods and the executor (which re-reads the file and every `token_file`)
//! picks up changes without a restart. Both directories are top-level, outside every
//! `--ro-paths` entry: restricted-mode runs share the executor's uid and gid and see what
//! Landlock admits (`/etc`, `/usr`, ...), and namespaces-mode runs see only those paths.

use super::child_meta;
use crate::resolve::{ResolvedPool, ResolvedTenant};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, EnvVar, KeyToPath, ProjectedVolumeSource, SecretProjection, Volume, VolumeMount,
    VolumeProjection,
};

/// Where the tenants ConfigMap is mounted.
pub const TENANTS_CONFIG_DIR: &str = "/sandpool-tenants-config";
/// The tenants file's key in the ConfigMap (and its file name in [`TENANTS_CONFIG_DIR`]).
pub const TENANTS_FILE_KEY: &str = "tenants.toml";
/// Where the tenants' tokens are mounted, each at `<dir>/<tenant>/token`.
pub const TENANT_TOKENS_DIR: &str = "/sandpool-tenants";
/// The executor's environment variable naming its tenants file.
pub const TENANTS_FILE_ENV: &str = "SANDPOOL_TENANTS_FILE";
/// Volume holding the tenants file.
pub const TENANTS_CONFIG_VOLUME: &str = "tenants-config";
/// Volume holding every tenant's token.
pub const TENANT_TOKENS_VOLUME: &str = "tenant-tokens";

/// Name of the pool's tenants ConfigMap.
pub fn tenants_config_map_name(pool: &str) -> String {
    format!("{pool}-tenants")
}

/// Where a tenant's token is mounted in the executor pods.
pub fn token_file(tenant: &str) -> String {
    format!("{TENANT_TOKENS_DIR}/{tenant}/token")
}

/// A TOML basic string. Tenant names are checked to be `[a-z0-9-]`, but quoting stays
/// correct whatever reaches it.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The executor's tenants file (docs/tenants.md): one `[[tenant]]` table each, in the spec's
/// order. Unset caps are left out, so the executor's own defaults (`--queue`,
/// `--max-sessions`, ...) apply. Written by hand: the format is four kinds of line.
pub fn tenants_toml(tenants: &[ResolvedTenant]) -> String {
    let mut out = String::from(
        "# Rendered by sandpool-operator from the SandboxPool's spec.tenants; tokens are mounted, not here.\n",
    );
    for t in tenants {
        out.push_str("\n[[tenant]]\n");
        out.push_str(&format!("name = {}\n", toml_string(&t.name)));
        out.push_str(&format!("token_file = {}\n", toml_string(&token_file(&t.name))));
        out.push_str(&format!("weight = {}\n", t.weight));
        let caps = [
            ("max_concurrency", t.max_concurrency),
            ("max_queue", t.max_queue),
            ("max_sessions", t.max_sessions),
        ];
        for (key, value) in caps {
            if let Some(value) = value {
                out.push_str(&format!("{key} = {value}\n"));
            }
        }
        if let Some(p) = t.max_priority {
            out.push_str(&format!("max_priority = {}\n", toml_string(p.as_str())));
        }
    }
    out
}

/// The ConfigMap `<pool>-tenants` holding the tenants file, or `None` for a pool without
/// tenants (and any left from before is removed).
pub fn tenants_config_map(pool: &ResolvedPool) -> Option<ConfigMap> {
    let tenants = pool.tenants.as_ref()?;
    let mut metadata = child_meta(pool);
    metadata.name = Some(tenants_config_map_name(&pool.name));
    Some(ConfigMap {
        metadata,
        data: Some([(TENANTS_FILE_KEY.to_owned(), tenants_toml(tenants))].into()),
        ..Default::default()
    })
}

/// The tenants file's volume and the tokens' volume, for a pool with tenants.
pub(super) fn volumes(pool: &ResolvedPool) -> Vec<Volume> {
    let Some(tenants) = &pool.tenants else {
        return Vec::new();
    };
    // Sorted by tenant, so reordering spec.tenants does not change the pod template (and
    // restart every pod); the tenants file keeps the spec's order.
    let mut sorted: Vec<&ResolvedTenant> = tenants.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let sources = sorted
        .into_iter()
        .map(|t| VolumeProjection {
            secret: Some(SecretProjection {
                name: t.secret_name.clone(),
                items: Some(vec![KeyToPath {
                    key: t.secret_key.clone(),
                    path: format!("{}/token", t.name),
                    ..Default::default()
                }]),
                // A missing Secret would hold the pod in ContainerCreating, which the pool
                // reports only as not ready. Optional, the pod starts and the executor exits
                // naming the tenant and its missing token_file, which the pool's status
                // quotes (CrashLoopBackOff); a running executor keeps its table meanwhile.
                optional: Some(true),
            }),
            ..Default::default()
        })
        .collect();
    vec![
        Volume {
            name: TENANTS_CONFIG_VOLUME.to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: tenants_config_map_name(&pool.name),
                ..Default::default()
            }),
            ..Default::default()
        },
        Volume {
            name: TENANT_TOKENS_VOLUME.to_owned(),
            // One projected volume rather than one per tenant: a volume name is at most 63
            // characters, as a tenant name may be, and one mount is one path to keep from runs.
            projected: Some(ProjectedVolumeSource {
                // Owner-only, as for the auth token (build::deployment explains fsGroup).
                default_mode: Some(0o400),
                sources: Some(sources),
            }),
            ..Default::default()
        },
    ]
}

/// Read-only mounts of [`volumes`], whole directories so updates reach running pods.
pub(super) fn volume_mounts(pool: &ResolvedPool) -> Vec<VolumeMount> {
    if pool.tenants.is_none() {
        return Vec::new();
    }
    [
        (TENANTS_CONFIG_VOLUME, TENANTS_CONFIG_DIR),
        (TENANT_TOKENS_VOLUME, TENANT_TOKENS_DIR),
    ]
    .into_iter()
    .map(|(name, path)| VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(true),
        ..Default::default()
    })
    .collect()
}

/// `SANDPOOL_TENANTS_FILE`, for a pool with tenants.
pub(super) fn env(pool: &ResolvedPool) -> Option<EnvVar> {
    pool.tenants.as_ref().map(|_| EnvVar {
        name: TENANTS_FILE_ENV.to_owned(),
        value: Some(format!("{TENANTS_CONFIG_DIR}/{TENANTS_FILE_KEY}")),
        ..Default::default()
    })
}
