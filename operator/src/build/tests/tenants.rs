//! Tenants in the built objects: the ConfigMap's tenants file (and no token in it), and the
//! Deployment's mounts and environment.

use serde_json::{Value, json};

use super::{meta, pod_security, resolved, to_json};
use crate::build::{children, deployment, tenants_config_map};

/// Two tenants as docs/tenants.md shows them: one with every field, one with the fewest.
fn two_tenants() -> Value {
    json!([
        {"name": "rl", "tokenSecretRef": {"name": "rl-token", "key": "token"}, "weight": 3,
         "maxConcurrency": 8, "maxQueue": 1000, "maxSessions": 4, "maxPriority": "interactive"},
        {"name": "sweeps", "tokenSecretRef": {"name": "sweeps-token", "key": "bearer.txt"}, "maxPriority": "batch"},
    ])
}

fn tenants_file(spec: Value) -> toml::Table {
    let cm = tenants_config_map(&resolved(spec)).expect("a pool with tenants gets the ConfigMap");
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get("tenants.toml"))
        .expect("tenants.toml key");
    text.parse::<toml::Table>().expect("tenants.toml is TOML")
}

#[test]
fn the_config_map_is_the_tenants_file_owned_by_the_pool() {
    let cm = to_json(&tenants_config_map(&resolved(json!({"tenants": two_tenants()}))).expect("ConfigMap"));
    let mut want_meta = meta();
    want_meta["name"] = json!("python-tenants");
    assert_eq!(cm["metadata"], want_meta);
    assert_eq!(cm["kind"], "ConfigMap");
    let keys: Vec<&String> = cm["data"].as_object().expect("data").keys().collect();
    assert_eq!(keys, ["tenants.toml"]);

    let file = tenants_file(json!({"tenants": two_tenants()}));
    let tenants = file["tenant"].as_array().expect("[[tenant]] tables");
    assert_eq!(
        tenants[0],
        toml::Value::Table(toml::toml! {
            name = "rl"
            token_file = "/sandpool-tenants/rl/token"
            weight = 3
            max_concurrency = 8
            max_queue = 1000
            max_sessions = 4
            max_priority = "interactive"
        })
    );
    // Unset caps are left out so the executor's defaults (--queue, --max-sessions) apply.
    assert_eq!(
        tenants[1],
        toml::Value::Table(toml::toml! {
            name = "sweeps"
            token_file = "/sandpool-tenants/sweeps/token"
            weight = 1
            max_priority = "batch"
        })
    );
    assert_eq!(file.len(), 1, "only [[tenant]] tables: {file:?}");
}

#[test]
fn the_config_map_never_holds_a_token() {
    let cm = to_json(&tenants_config_map(&resolved(json!({"tenants": two_tenants()}))).expect("ConfigMap"));
    let text = cm["data"]["tenants.toml"].as_str().expect("text");
    for tenant in tenants_file(json!({"tenants": two_tenants()}))["tenant"]
        .as_array()
        .expect("tables")
    {
        assert!(tenant.get("token").is_none(), "{tenant:?}");
    }
    assert!(!text.contains("token ="), "{text}");
    // Only where the token is: the Secret's name and key stay in the pod spec.
    assert!(!text.contains("rl-token") && !text.contains("bearer.txt"), "{text}");
}

#[test]
fn a_pool_without_tenants_gets_no_config_map_mount_or_env() {
    let pool = resolved(json!({}));
    assert!(children(&pool).tenants.is_none());
    let d = to_json(&deployment(&pool));
    let text = d.to_string();
    assert!(!text.contains("tenants"), "{text}");
    assert!(!text.contains("SANDPOOL_TENANTS_FILE"), "{text}");
}

#[test]
fn the_deployment_mounts_the_file_and_each_token_as_whole_directories() {
    let d = to_json(&deployment(&resolved(json!({"tenants": two_tenants()}))));
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let env = c["env"].as_array().expect("env");
    assert!(
        env.contains(&json!({"name": "SANDPOOL_TENANTS_FILE", "value": "/sandpool-tenants-config/tenants.toml"})),
        "{env:?}"
    );
    let volumes = pod["volumes"].as_array().expect("volumes");
    assert!(
        volumes.contains(&json!({"name": "tenants-config", "configMap": {"name": "python-tenants"}})),
        "{volumes:?}"
    );
    // One projected volume, sorted by tenant so reordering spec.tenants restarts no pod.
    assert!(
        volumes.contains(
            &json!({"name": "tenant-tokens", "projected": {"defaultMode": 0o400, "sources": [
                {"secret": {"name": "rl-token", "items": [{"key": "token", "path": "rl/token"}], "optional": true}},
                {"secret": {"name": "sweeps-token", "items": [{"key": "bearer.txt", "path": "sweeps/token"}], "optional": true}},
            ]}})
        ),
        "{volumes:?}"
    );
    let mounts = c["volumeMounts"].as_array().expect("mounts");
    assert!(
        mounts.contains(&json!({"name": "tenants-config", "mountPath": "/sandpool-tenants-config", "readOnly": true}))
    );
    assert!(mounts.contains(&json!({"name": "tenant-tokens", "mountPath": "/sandpool-tenants", "readOnly": true})));
    // subPath mounts are never refreshed by the kubelet: updates would need a restart.
    assert!(mounts.iter().all(|m| m.get("subPath").is_none()), "{mounts:?}");
}

#[test]
fn the_token_files_match_the_mounted_paths() {
    let pool = resolved(json!({"tenants": two_tenants()}));
    let d = to_json(&deployment(&pool));
    let pod = &d["spec"]["template"]["spec"];
    let mount_dir = pod["containers"][0]["volumeMounts"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["name"] == "tenant-tokens"))
        .and_then(|m| m["mountPath"].as_str())
        .expect("token mount");
    let projected = pod["volumes"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == "tenant-tokens"))
        .expect("tokens volume");
    let mounted: Vec<String> = projected["projected"]["sources"]
        .as_array()
        .expect("sources")
        .iter()
        .map(|s| {
            format!(
                "{mount_dir}/{}",
                s["secret"]["items"][0]["path"].as_str().expect("path")
            )
        })
        .collect();
    let mut named: Vec<String> = tenants_file(json!({"tenants": two_tenants()}))["tenant"]
        .as_array()
        .expect("tables")
        .iter()
        .map(|t| t["token_file"].as_str().expect("token_file").to_owned())
        .collect();
    named.sort();
    assert_eq!(mounted, named);
}

#[test]
fn reordering_tenants_or_changing_shares_leaves_the_pod_template_alone() {
    // The executor re-reads the tenants file: weights and caps reach pods without a restart,
    // so they must not be in the pod template (no config hash annotation either).
    let template =
        |tenants: Value| to_json(&deployment(&resolved(json!({"tenants": tenants}))))["spec"]["template"].clone();
    let before = template(two_tenants());
    let mut changed = two_tenants();
    changed[0]["weight"] = json!(7);
    changed[1]["maxQueue"] = json!(5);
    assert_eq!(template(changed), before);
    let reversed = json!([two_tenants()[1].clone(), two_tenants()[0].clone()]);
    assert_eq!(template(reversed), before);
    let annotations = before["metadata"]["annotations"].as_object().expect("annotations");
    assert_eq!(
        annotations.keys().collect::<Vec<_>>(),
        ["kubectl.kubernetes.io/default-container"]
    );
}

/// Paths restricted-mode runs may read (the sandbox's `DEFAULT_RO_PATHS`), plus the work
/// root they run in; a tenant's token must be under none of them.
const READABLE_BY_RUNS: [&str; 11] = [
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/usr",
    "/etc",
    "/opt",
    "/var/lib/sandpool",
    "/tmp",
];

#[test]
fn tokens_and_file_stay_outside_every_path_runs_can_read_in_both_modes() {
    for mode in ["namespaces", "restricted"] {
        let d = to_json(&deployment(&resolved(
            json!({"isolation": {"mode": mode}, "tenants": two_tenants()}),
        )));
        let mounts = d["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
            .as_array()
            .expect("mounts")
            .clone();
        for name in ["tenant-tokens", "tenants-config"] {
            let path = mounts
                .iter()
                .find(|m| m["name"] == name)
                .and_then(|m| m["mountPath"].as_str())
                .unwrap_or_else(|| panic!("{name} mounted in {mode}"));
            for readable in READABLE_BY_RUNS {
                let under = path == readable || path.starts_with(&format!("{readable}/"));
                assert!(!under, "{mode}: {name} at {path} is under {readable}");
            }
        }
    }
}

#[test]
fn a_restricted_pool_with_tenants_still_fits_the_restricted_profile() {
    let d = to_json(&deployment(&resolved(
        json!({"isolation": {"mode": "restricted"}, "tenants": two_tenants()}),
    )));
    let violations = pod_security::restricted_violations(&d["spec"]["template"]);
    assert!(violations.is_empty(), "{violations:?}");
}
