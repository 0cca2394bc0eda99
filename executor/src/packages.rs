//! The packages each language's programs can import (`list_packages` in the
//! language table), listed once at start-up from inside the sandbox, so that
//! what GetCapabilities reports is what a run sees (extra `--python-path`
//! directories included).

use crate::engine::Engine;
use crate::languages::{Availability, Package, package_lines};
use crate::limits::Limits;
use futures::StreamExt;
use sandpool_sandbox::RunSpec;
use std::collections::BTreeMap;
use std::time::Duration;

/// Runs each available language's `list_packages` command; a failing one lists nothing (and is logged).
pub async fn probe(engine: &Engine) -> BTreeMap<String, Vec<Package>> {
    let limits = Limits {
        wall: Duration::from_secs(30),
        cpu: Duration::from_secs(30),
        ..engine.policy.compile_defaults
    };
    let listed = engine.languages.iter().filter_map(|lang| {
        let argv = lang.list_packages.clone()?;
        matches!(
            engine.availability().get(&lang.name),
            Some(Availability::Available { .. })
        )
        .then_some((lang, argv))
    });
    let probes = listed.map(|(lang, argv)| async move {
        let spec = RunSpec {
            argv,
            env: engine.env_for(lang),
            stdin: vec![],
            limits,
            gpu: lang.gpu,
            warm: None,
        };
        let res = async {
            let slot = engine.admission.acquire(None).await.map_err(|e| e.to_string())?;
            let work = engine.sandbox.work_dir(slot.index()).map_err(|e| e.to_string())?;
            engine
                .sandbox
                .run(slot.index(), &work, &spec)
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        let packages = match res {
            Ok(o) if o.exit_code == 0 && o.signal == 0 => package_lines(&o.stdout),
            Ok(o) => {
                tracing::warn!(language = %lang.name, exit = o.exit_code, signal = o.signal,
                    stderr = %String::from_utf8_lossy(&o.stderr), "list_packages failed");
                vec![]
            }
            Err(e) => {
                tracing::warn!(language = %lang.name, error = %e, "list_packages failed");
                vec![]
            }
        };
        tracing::info!(language = %lang.name, packages = packages.len(), "listed packages");
        (lang.name.clone(), packages)
    });
    // At most `slots` at once, so none waits in the queue.
    futures::stream::iter(probes)
        .buffer_unordered(engine.sandbox.slots().max(1))
        .collect()
        .await
}
