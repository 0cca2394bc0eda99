//! Artifacts built once that a language's runs share read-only: precompiled headers and the
//! like (a language entry's `shared`, see [`SharedData`] and docs/warm-starts.md).
//!
//! Each is built on the language's first run that may use it, in that run's slot, by the
//! entry's `build` command inside the sandbox (so it matches what runs see: the same
//! compiler, paths and flags); what the build leaves in its work dir is exported to the
//! executor's shared dir, which runs see read-only at [`SHARED_PATH`]. No run's data goes in:
//! the build runs only the table's commands and files. A build that fails is logged and not
//! tried again; that language's runs stay cold.

use crate::admission::SlotGuard;
use crate::languages::{Language, SharedData};
use crate::limits::Limits;
use crate::task::blocking;
use crate::watchdog::RunWatched;
use sandpool_sandbox::{RunSpec, Runner, SHARED_PATH};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::sync::OnceCell;

/// The executor's shared artifacts: per language with a `shared` entry, built once.
#[derive(Debug, Default)]
pub struct Shared {
    /// The host directory runs see at [`SHARED_PATH`] (None: shared artifacts are off).
    host: Option<PathBuf>,
    built: BTreeMap<String, OnceCell<Option<Arc<Ready>>>>,
}

/// A language's built artifacts: the arguments its warm runs get.
#[derive(Debug)]
pub struct Ready {
    compile_args: Vec<String>,
    /// The judge's prelude, and what a source starting with it gets too.
    prelude: Option<(String, Vec<String>)>,
    run_args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Ready {
    fn new(lang: &Language, data: &SharedData) -> Self {
        let dir = format!("{SHARED_PATH}/{}", lang.name);
        let fill = |args: &[String]| args.iter().map(|a| a.replace("{shared}", &dir)).collect::<Vec<_>>();
        let prelude = lang.judge.assert_prelude.trim_start();
        Ready {
            compile_args: fill(&data.compile_args),
            prelude: (!data.prelude_args.is_empty() && !prelude.trim().is_empty())
                .then(|| (prelude.to_owned(), fill(&data.prelude_args))),
            run_args: fill(&data.run_args),
            env: data
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.replace("{shared}", &dir)))
                .collect(),
        }
    }

    /// `env` with the artifacts' variables set (replacing any of the same name).
    fn env(&self, mut env: Vec<(String, String)>) -> Vec<(String, String)> {
        env.retain(|(k, _)| !self.env.iter().any(|(s, _)| s == k));
        env.extend(self.env.iter().cloned());
        env
    }

    /// Whether a phase with this language's commands changes at all with the artifacts.
    fn changes_run(&self) -> bool {
        !self.run_args.is_empty() || !self.env.is_empty()
    }

    /// The compile argv for a source that reads `source`; None when nothing changes.
    fn compile_argv(&self, argv: &[String], source: &[u8]) -> Option<Vec<String>> {
        let mut extra = self.compile_args.clone();
        if let Some((text, args)) = &self.prelude
            && source.starts_with(text.as_bytes())
        {
            extra.extend(args.iter().cloned());
        }
        with_args(argv, extra)
    }

    /// The run argv; None when nothing changes.
    fn run_argv(&self, argv: &[String]) -> Option<Vec<String>> {
        with_args(argv, self.run_args.clone())
    }
}

/// A phase's argv and environment, with a language's shared artifacts or as the table has them.
#[derive(Debug)]
pub struct Command {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Whether the artifacts changed the phase (reported as `PhaseResult.warm`).
    pub warm: bool,
}

/// The compile `argv` of `lang` for a program whose source is `source`, with `shared`.
pub fn compile_command(shared: Option<&Ready>, lang: &Language, argv: &[String], source: Option<&[u8]>) -> Command {
    let env = phase_env(shared, lang);
    let Some(s) = shared else {
        return Command {
            argv: argv.to_vec(),
            env,
            warm: false,
        };
    };
    let warm_argv = source.and_then(|src| s.compile_argv(argv, src));
    Command {
        warm: warm_argv.is_some() || s.changes_run(),
        argv: warm_argv.unwrap_or_else(|| argv.to_vec()),
        env,
    }
}

/// The run command of `lang` (before a request's arguments), with `shared`.
pub fn run_command(shared: Option<&Ready>, lang: &Language) -> Command {
    Command {
        argv: shared
            .and_then(|s| s.run_argv(&lang.run))
            .unwrap_or_else(|| lang.run.clone()),
        env: phase_env(shared, lang),
        warm: shared.is_some_and(Ready::changes_run),
    }
}

fn phase_env(shared: Option<&Ready>, lang: &Language) -> Vec<(String, String)> {
    match shared {
        Some(s) => s.env(lang.run_env()),
        None => lang.run_env(),
    }
}

/// `argv` with `extra` after its program name.
fn with_args(argv: &[String], extra: Vec<String>) -> Option<Vec<String>> {
    let (first, rest) = argv.split_first()?;
    if extra.is_empty() {
        return None;
    }
    Some(
        std::iter::once(first.clone())
            .chain(extra)
            .chain(rest.iter().cloned())
            .collect(),
    )
}

impl Shared {
    /// Shared artifacts exported under `host` (a directory the sandbox shows at
    /// [`SHARED_PATH`]) for each language of `langs` with a `shared` entry; `None`: off.
    pub fn new<'a>(host: Option<PathBuf>, langs: impl Iterator<Item = &'a Language>) -> Self {
        let built = match &host {
            Some(_) => langs
                .filter(|l| l.shared.is_some())
                .map(|l| (l.name.clone(), OnceCell::new()))
                .collect(),
            None => BTreeMap::new(),
        };
        Shared { host, built }
    }

    /// Whether `lang` has shared artifacts here (built or not).
    pub fn has(&self, lang: &str) -> bool {
        self.built.contains_key(lang)
    }

    /// Whether `lang`'s artifacts are built and in use.
    pub fn is_ready(&self, lang: &str) -> bool {
        self.ready(lang).is_some()
    }

    /// `lang`'s artifacts if they are built (never builds them).
    pub fn ready(&self, lang: &str) -> Option<Arc<Ready>> {
        self.built.get(lang).and_then(OnceCell::get).cloned().flatten()
    }

    /// `lang`'s artifacts, building them first in `slot` when this is the first use (concurrent
    /// first uses wait for the one build); None when `lang` has none or they failed to build.
    /// The build runs under `limits` (the ceilings: a precompiled `<bits/stdc++.h>` is a
    /// 100 MB file, Go's standard library seconds of CPU), each step through `run` (the
    /// engine's one way into the sandbox, in `slot`).
    pub async fn get(
        &self,
        sandbox: &dyn Runner,
        run: &dyn RunWatched,
        limits: Limits,
        slot: &SlotGuard,
        lang: &Language,
    ) -> Option<Arc<Ready>> {
        let (Some(host), Some(cell), Some(data)) = (&self.host, self.built.get(&lang.name), &lang.shared) else {
            return None;
        };
        cell.get_or_init(|| async {
            let t = std::time::Instant::now();
            match build(sandbox, run, limits, slot, lang, data, host).await {
                Ok(()) => {
                    tracing::info!(language = %lang.name, secs = t.elapsed().as_secs_f64(), "shared artifacts built");
                    Some(Arc::new(Ready::new(lang, data)))
                }
                Err(e) => {
                    // Runs still work, only cold; the next executor start tries again.
                    tracing::warn!(language = %lang.name, error = %e, "building shared artifacts failed; runs start cold");
                    None
                }
            }
        })
        .await
        .clone()
    }
}

/// Runs `data.build` in a fresh work dir of `slot` and exports what it left to `host/LANG`.
async fn build(
    sandbox: &dyn Runner,
    run: &dyn RunWatched,
    limits: Limits,
    slot: &SlotGuard,
    lang: &Language,
    data: &SharedData,
    host: &Path,
) -> Result<(), String> {
    let work = sandbox.work_dir(slot.index()).map_err(|e| e.to_string())?;
    let mut files: Vec<(String, String)> = data.files.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Some(p) = &data.prelude_file {
        files.push((p.clone(), lang.judge.assert_prelude.trim_start().to_owned()));
    }
    let work = blocking(move || {
        for (path, content) in &files {
            work.write_file(path, content.as_bytes(), false)
                .map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(work)
    })
    .await
    .map_err(|e| e.to_string())??;
    let mut steps = Vec::new();
    if !data.build.is_empty() {
        steps.push(data.build.clone());
    }
    if let (Some(c), false) = (&lang.compile, data.train_compile_args.is_empty()) {
        steps.extend(with_args(c, data.train_compile_args.clone()));
    }
    if !data.train_run_args.is_empty() {
        steps.extend(with_args(&lang.run, data.train_run_args.clone()));
    }
    for argv in steps {
        let spec = RunSpec {
            argv,
            env: lang.run_env(),
            stdin: vec![],
            limits,
            gpu: lang.gpu,
            warm: None,
        };
        let o = run
            .run_watched(slot.index(), &work, &spec)
            .await
            .map_err(|e| e.to_string())?;
        if o.exit_code != 0 || o.signal != 0 || o.killed_by.is_some() || o.oom_killed {
            return Err(format!(
                "{:?}: exit {} signal {} killed by {:?}: {}",
                spec.argv.first(),
                o.exit_code,
                o.signal,
                o.killed_by,
                String::from_utf8_lossy(&o.stderr).chars().take(500).collect::<String>()
            ));
        }
    }
    let (dest, staging) = (host.join(&lang.name), host.join(format!(".{}.building", lang.name)));
    blocking(move || {
        // What an earlier executor on this work root left is not trusted: made afresh.
        for d in [&staging, &dest] {
            if d.exists() {
                std::fs::remove_dir_all(d).map_err(|e| format!("clearing {}: {e}", d.display()))?;
            }
        }
        work.export_to(&staging).map_err(|e| e.to_string())?;
        std::fs::rename(&staging, &dest).map_err(|e| format!("renaming the export: {e}"))
    })
    .await
    .map_err(|e| e.to_string())?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::languages::LanguageTable;

    #[test]
    fn arguments_go_after_the_program_and_the_prelude_args_only_before_the_prelude() {
        let t = LanguageTable::parse(
            "[c]\nsource='m.c'\ncompile=['cc','-O2','m.c']\nrun=['./m']\nversion=['cc']\n\
             judge={assert_prelude='''\n#include <a.h>\n'''}\n\
             shared={build=['cc'], prelude_file='p.h', compile_args=['-I','{shared}/i'], prelude_args=['-include','{shared}/p.h']}\n",
        )
        .unwrap();
        let c = t.get("c").unwrap();
        let r = Ready::new(c, c.shared.as_ref().unwrap());
        let argv = c.compile.clone().unwrap();
        let dir = format!("{SHARED_PATH}/c");
        assert_eq!(
            r.compile_argv(&argv, b"#include <a.h>\nint main(){}").unwrap(),
            [
                "cc",
                "-I",
                &format!("{dir}/i"),
                "-include",
                &format!("{dir}/p.h"),
                "-O2",
                "m.c"
            ]
        );
        assert_eq!(
            r.compile_argv(&argv, b"#include <b.h>\n#include <a.h>\n").unwrap(),
            ["cc", "-I", &format!("{dir}/i"), "-O2", "m.c"]
        );
        assert_eq!(r.run_argv(&c.run), None);
    }

    #[test]
    fn a_shared_entry_is_checked() {
        let base = "[c]\nsource='m.c'\ncompile=['cc']\nrun=['./m']\nversion=['cc']\n";
        assert!(LanguageTable::parse(&format!("{base}shared={{build=[]}}\n")).is_err());
        assert!(LanguageTable::parse(&format!("{base}shared={{train_run_args=['-X']}}\n")).is_ok());
        assert!(LanguageTable::parse(&format!("{base}shared={{build=['x'], files={{'../a'='x'}}}}\n")).is_err());
        assert!(LanguageTable::parse(&format!("{base}shared={{build=['x'], prelude_args=['-include']}}\n")).is_err());
        assert!(
            LanguageTable::parse(
                "[p]\nsource='m.py'\nrun=['p']\nversion=['p']\nshared={build=['x'], compile_args=['-O']}\n"
            )
            .is_err()
        );
        assert!(LanguageTable::parse(&format!("{base}shared={{build=['x']}}\n")).is_ok());
    }
}
