//! Every example pool in `manifests/examples/` must pass the CRD's CEL rules and the
//! operator's own checks, and render.

use kube::core::cel::validate_cel;
use sandpool_operator::config::OperatorConfig;
use sandpool_operator::crd::SandboxPool;
use sandpool_operator::defaults::PoolDefaults;
use sandpool_operator::{render, resolve};
use serde::Deserialize;

fn example_pools() -> Vec<(String, String)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../manifests/examples");
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("manifests/examples exists")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("example reads");
            (p.display().to_string(), text)
        })
        .filter(|(_, text)| text.lines().any(|l| l == "kind: SandboxPool"))
        .collect();
    files.sort();
    files
}

#[test]
fn examples_exist_for_cpu_gpu_restricted_tenant_and_session_pools() {
    let names: Vec<String> = example_pools().into_iter().map(|(p, _)| p).collect();
    for wanted in [
        "cpu-pool.yaml",
        "gpu-pool.yaml",
        "restricted-pool.yaml",
        "tenants-pool.yaml",
        "sessions-pool.yaml",
    ] {
        assert!(
            names.iter().any(|n| n.ends_with(wanted)),
            "{wanted} missing from {names:?}"
        );
    }
}

#[test]
fn example_pools_pass_cel_resolve_and_render() {
    for (path, text) in example_pools() {
        for document in serde_yaml::Deserializer::from_str(&text) {
            let pool = SandboxPool::deserialize(document).unwrap_or_else(|e| panic!("{path}: {e}"));
            if let Err(e) = validate_cel(&pool) {
                panic!("{path}: CEL rejects it: {e:?}");
            }
            resolve::resolve(&pool, &PoolDefaults::default(), "default").unwrap_or_else(|e| panic!("{path}: {e}"));
        }
        let out =
            render::render(&text, &OperatorConfig::default(), "default").unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(
            out.contains("kind: NetworkPolicy") && out.contains("kind: Deployment"),
            "{path}"
        );
    }
}
