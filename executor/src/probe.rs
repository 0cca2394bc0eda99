//! What works here, asked from inside the sandbox once at start-up: each language's
//! version command decides whether it is available ([`languages`]), and each available
//! language's `list_packages` command lists what its programs can import ([`packages`]),
//! so that GetCapabilities reports what a run sees (extra `--python-path` directories
//! included). Both go through one loop (`each`): a run slot per command, at most `slots`
//! at once, so none ever waits in the queue.

use crate::admission::Admission;
use crate::languages::{Availability, Language, LanguageTable, Package, package_lines, version_line};
use crate::limits::Limits;
use crate::watchdog::RunWatched;
use futures::StreamExt;
use sandpool_sandbox::{RunOutcome, RunSpec, Runner};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What start-up commands run with: the compile defaults, with 30 s of wall and CPU time.
fn limits(compile_defaults: Limits) -> Limits {
    Limits {
        wall: Duration::from_secs(30),
        cpu: Duration::from_secs(30),
        ..compile_defaults
    }
}

/// Runs `argv` of each `(language, argv)` in a fresh work dir of its own slot; a failure
/// to get a slot, a work dir or a run comes back as its message.
async fn each<'a>(
    sandbox: &dyn Runner,
    run: &dyn RunWatched,
    admission: &Arc<Admission>,
    compile_defaults: Limits,
    commands: impl Iterator<Item = (&'a Language, Vec<String>)>,
) -> Vec<(&'a Language, Result<RunOutcome, String>)> {
    let limits = limits(compile_defaults);
    let runs = commands.map(|(lang, argv)| async move {
        let spec = RunSpec {
            argv,
            env: lang.run_env(),
            stdin: vec![],
            limits,
            gpu: lang.gpu,
            warm: None,
        };
        let res = async {
            let slot = admission.acquire(None).await.map_err(|e| e.to_string())?;
            let work = sandbox.work_dir(slot.index()).map_err(|e| e.to_string())?;
            run.run_watched(slot.index(), &work, &spec)
                .await
                .map_err(|e| e.to_string())
        }
        .await;
        (lang, res)
    });
    futures::stream::iter(runs)
        .buffer_unordered(sandbox.slots().max(1))
        .collect()
        .await
}

/// Each language's availability: its version command's first line, or why it does not work here.
pub async fn languages(
    sandbox: &dyn Runner,
    run: &dyn RunWatched,
    admission: &Arc<Admission>,
    table: &LanguageTable,
    compile_defaults: Limits,
) -> BTreeMap<String, Availability> {
    let (gpu_less, probed): (Vec<&Language>, Vec<&Language>) =
        table.iter().partition(|lang| lang.gpu && !sandbox.has_gpu());
    let mut out: BTreeMap<String, Availability> = gpu_less
        .into_iter()
        .map(|lang| {
            let reason = "needs a GPU executor (--gpu)".into();
            (lang.name.clone(), Availability::Unavailable { reason })
        })
        .collect();
    let commands = probed.into_iter().map(|lang| (lang, lang.version.clone()));
    for (lang, res) in each(sandbox, run, admission, compile_defaults, commands).await {
        let avail = match res {
            Ok(o) if o.exit_code == 0 && o.signal == 0 => Availability::Available {
                version: version_line(&o.stdout, &o.stderr).unwrap_or_else(|| "unknown".into()),
            },
            Ok(o) => Availability::Unavailable {
                reason: format!(
                    "version command {:?} failed (exit {}, signal {}): {}",
                    lang.version,
                    o.exit_code,
                    o.signal,
                    version_line(&o.stderr, &o.stdout).unwrap_or_default()
                ),
            },
            Err(e) => Availability::Unavailable { reason: e },
        };
        tracing::info!(language = %lang.name, availability = ?avail, "probed language");
        out.insert(lang.name.clone(), avail);
    }
    out
}

/// Each available language's packages (`list_packages`); a failing listing lists nothing
/// (and is logged).
pub async fn packages(
    sandbox: &dyn Runner,
    run: &dyn RunWatched,
    admission: &Arc<Admission>,
    table: &LanguageTable,
    availability: &BTreeMap<String, Availability>,
    compile_defaults: Limits,
) -> BTreeMap<String, Vec<Package>> {
    let listed = table.iter().filter_map(|lang| {
        let argv = lang.list_packages.clone()?;
        matches!(availability.get(&lang.name), Some(Availability::Available { .. })).then_some((lang, argv))
    });
    each(sandbox, run, admission, compile_defaults, listed)
        .await
        .into_iter()
        .map(|(lang, res)| {
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
        })
        .collect()
}
