//! Mode `restricted`: for pods that run as a non-root uid with every
//! capability dropped, `allowPrivilegeEscalation: false` and the runtime's
//! default seccomp profile (Pod Security `restricted`). No namespaces, mounts
//! or cgroups: each run gets a private directory under the work root (its
//! work dir) and a private temporary directory, and is confined with what an
//! unprivileged process may still do:
//!
//! - Landlock: system directories read-only, its own directories read-write,
//!   nothing else; TCP bind/connect denied (ABI 4+); signals and abstract unix
//!   sockets scoped to the run (ABI 6+) ([`landlock`]);
//! - a seccomp filter of our own on top of the runtime's: the namespaces
//!   mode's, plus unix sockets only and no leaving the process group ([`seccomp`]);
//! - rlimits (CPU, data, processes, file size, open files, stack, core);
//! - a process group per run and the executor as child subreaper, so the whole
//!   tree is found and killed at the end ([`accounting`]);
//! - CPU time and memory read from `/proc` (and `wait4`), since cgroups are
//!   not writable;
//! - Python runs forked from a per-slot zygote that confines each child the same
//!   way (where Landlock scopes signals, ABI 6: [`warm`]).
//!
//! Programs see their work dir's real path (there is no `/work`): commands and
//! environment naming `/work` or `/tmp` are rewritten to the run's directories.

mod accounting;
mod landlock;
mod seccomp;
mod spawn;
mod warm;

use crate::error::os;
use crate::probe::Feature;
use crate::runio::{Captured, KillHandle, Output, cpu_time, exit_and_signal, resolve_exe, rlimit, stdin_memfd};
use crate::runner::{BoxFuture, Runner};
use crate::sys::{self, process};
use crate::{Features, IsolationMode, RunOutcome, RunSpec, SandboxConfig, SandboxError, Termination, WorkDir};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The restricted runner: what start-up prepared, shared by all runs.
#[derive(Debug)]
pub(crate) struct Restricted {
    cfg: SandboxConfig,
    /// No other executor uses the work root while this one lives.
    _lock: crate::workroot::WorkRootLock,
    features: Features,
    landlock_abi: i32,
    filters: Arc<Vec<Vec<libc::sock_filter>>>,
    /// `<work root>/runs`: every run's directories, nothing else.
    runs_dir: PathBuf,
    next: AtomicU64,
    /// The executor is root: each slot's runs get their own uid (`uid_base + slot`).
    slot_uids: bool,
    /// The executor's uid (the runs' when `slot_uids` is false).
    uid: u32,
    spawner: spawn::Spawner,
    /// Per slot: the zygotes warm runs fork from; used only where `warm` is true.
    zygotes: Arc<crate::zygote::Zygotes>,
    /// Warm starts are offered: Landlock scopes signals (ABI 6), so no run can signal a
    /// zygote or another run's processes.
    warm: bool,
}

fn unavailable(why: String) -> SandboxError {
    SandboxError::ModeUnavailable("restricted", why)
}

impl Restricted {
    /// Probes the kernel and refuses to start when a protection the mode
    /// depends on is missing (Landlock, seccomp, `no_new_privs`, a writable
    /// work root, the subreaper), saying which and why.
    pub fn new(cfg: SandboxConfig) -> Result<Self, SandboxError> {
        cfg.expect_mode(IsolationMode::Restricted)?;
        let mut features = crate::probe::probe();
        let abi = landlock::abi_version().map_err(|why| {
            unavailable(format!(
                "{why}; without it runs could read and write all the executor's uid can"
            ))
        })?;
        if !crate::seccomp::available() {
            return Err(unavailable("the kernel has no seccomp filters".into()));
        }
        let (euid, pid) = (nix::unistd::geteuid().as_raw(), std::process::id() as i32);
        let slot_uids = euid == 0;
        // Before the runs dir is emptied: a live executor's runs are not leftovers.
        use crate::workroot::{WorkRootError, WorkRootLock};
        let lock = WorkRootLock::acquire(&cfg.work_root).map_err(|e| match e {
            WorkRootError::Create(..) | WorkRootError::Open(..) => unavailable(format!(
                "the work root {} must be a directory uid {euid} can write (in a pod: an emptyDir): {e}",
                cfg.work_root.display()
            )),
            e => e.into(),
        })?;
        if let Some(d) = &cfg.shared_dir {
            crate::workroot::prepare_shared_dir(d).map_err(os("preparing the shared dir"))?;
        }
        let runs_dir = cfg.work_root.join("runs");
        prepare_runs_dir(&runs_dir, slot_uids).map_err(|e| {
            unavailable(format!(
                "the work root {} must be a directory uid {euid} can write (in a pod: an emptyDir): {e}",
                cfg.work_root.display()
            ))
        })?;
        if let Err(e) = process::set_child_subreaper() {
            return Err(unavailable(format!("cannot become child subreaper: {e}")));
        }
        let filters = seccomp::build_filters(pid, abi >= 6).map_err(|e| SandboxError::Other(e.to_string()))?;
        let filters = Arc::new(filters);
        // Confine a throwaway thread exactly as a run is, and check the result:
        // a runtime profile that blocks landlock or seccomp shows up here.
        let probe_dir = runs_dir.join("probe");
        let _ = std::fs::remove_dir_all(&probe_dir);
        std::fs::create_dir(&probe_dir).map_err(os("creating the probe directory"))?;
        let paths = landlock::Paths {
            read_exec: cfg.ro_paths.clone(),
            read_write: vec![probe_dir.clone()],
        };
        let rules = landlock::ruleset(abi, &paths).map_err(|e| unavailable(e.to_string()))?;
        let probe = spawn::Confinement {
            rlimits: vec![],
            landlock: rules,
            filters: filters.clone(),
            parent: pid,
        };
        let outside = cfg.work_root.clone();
        let tested = std::thread::scope(|s| s.spawn(|| spawn::self_test(&probe, &outside)).join());
        let _ = std::fs::remove_dir_all(&probe_dir);
        match tested {
            Ok(Ok(())) => {}
            Ok(Err(why)) => return Err(unavailable(format!("a protection is not in force: {why}"))),
            Err(_) => return Err(unavailable("the confinement self-test panicked".into())),
        }
        let spawner = spawn::Spawner::start().map_err(os("starting the spawner thread"))?;

        for f in ["seccomp", "no_new_privs"] {
            features.set_in_use(f, true);
        }
        features.0.retain(|f| f.name != "landlock");
        let feat = |name, available: bool, in_use: bool, detail: String| Feature {
            name,
            available,
            in_use: in_use && available,
            detail,
        };
        features.0.extend([
            feat("landlock", true, true, format!("ABI {abi}: filesystem")),
            feat(
                "landlock_net",
                abi >= 4,
                true,
                if abi >= 4 {
                    "TCP bind and connect denied".into()
                } else {
                    format!("needs ABI 4, kernel has {abi} (seccomp still refuses IP sockets)")
                },
            ),
            feat(
                "landlock_scope",
                abi >= 6,
                true,
                if abi >= 6 {
                    "signals and abstract unix sockets scoped to the run".into()
                } else {
                    format!("needs ABI 6, kernel has {abi} (seccomp refuses signals to the executor and to groups)")
                },
            ),
            feat(
                "rlimits",
                true,
                true,
                "cpu, data, nproc, fsize, nofile, stack, core".into(),
            ),
            feat(
                "child_subreaper",
                true,
                true,
                "orphans of a run are reaped and killed".into(),
            ),
            feat(
                "per_slot_uid",
                slot_uids,
                true,
                if slot_uids {
                    format!("slot i runs as uid {} + i", cfg.uid_base)
                } else {
                    format!("every run shares the executor's uid {euid}")
                },
            ),
            feat(
                "work_dir_size_cap",
                false,
                false,
                "a directory on the work root's volume: only the volume's size caps it".into(),
            ),
            feat(
                "warm_starts",
                abi >= crate::RESTRICTED_WARM_LANDLOCK_ABI,
                true,
                if abi >= crate::RESTRICTED_WARM_LANDLOCK_ABI {
                    "Python runs fork from a per-slot zygote, confined as a cold run".into()
                } else {
                    format!("needs Landlock ABI 6 (signal scoping), kernel has {abi}: runs start cold")
                },
            ),
            feat(
                "private_network",
                false,
                false,
                "no network namespace: unix sockets only (seccomp), TCP also denied by Landlock where it can".into(),
            ),
        ]);
        let r = Restricted {
            _lock: lock,
            features,
            landlock_abi: abi,
            filters,
            runs_dir,
            next: AtomicU64::new(0),
            slot_uids,
            uid: euid,
            spawner,
            zygotes: Arc::new(crate::zygote::Zygotes::new(cfg.slots)),
            warm: abi >= crate::RESTRICTED_WARM_LANDLOCK_ABI,
            cfg,
        };
        tracing::info!(mode = "restricted", features = %r.features, "sandbox ready");
        Ok(r)
    }

    fn run_uid(&self, slot: usize) -> u32 {
        if self.slot_uids {
            self.cfg.uid_base + slot as u32
        } else {
            self.uid
        }
    }

    /// A run's directory: numbered (unique) and with a random part, so that no run can
    /// guess a concurrent run's path (Landlock keeps it out anyway; a path is still a lead).
    fn fresh_path(&self, prefix: &str) -> PathBuf {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let salt = getrandom::u64().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "no random source for a run's directory name");
            0
        });
        self.runs_dir.join(format!("{prefix}{n}-{salt:016x}"))
    }

    /// The shared dir's host path, or empty: what [`crate::SHARED_PATH`] is rewritten to.
    fn shared_path(&self) -> String {
        self.cfg
            .shared_dir
            .as_deref()
            .map(|d| d.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// A zygote's environment: the configuration's, with the shared dir's path as runs see
    /// it, and `/work` and `/tmp` (`HOME`, `TMPDIR`) naming a directory that never exists:
    /// the zygote's start-up (`site`'s user directory under `HOME`) must find nothing of the
    /// host's `/tmp`, as a cold run finds nothing in its own empty one.
    fn zygote_env(&self, cfg: &crate::ZygoteConfig) -> Vec<(String, String)> {
        let shared = self.shared_path();
        let none = self.runs_dir.join("none").to_string_lossy().into_owned();
        cfg.env
            .iter()
            .map(|(k, v)| (k.clone(), rewrite_paths(v, &none, &none, &shared)))
            .collect()
    }
}

/// Makes `<work root>/runs`, clearing what a crashed executor left there.
fn prepare_runs_dir(dir: &Path, slot_uids: bool) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(root) = dir.parent() {
        std::fs::create_dir_all(root)?;
    }
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::create_dir(dir)?;
    // Slot uids must get through to their own (0700) directories, and no further.
    let mode = if slot_uids { 0o711 } else { 0o700 };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    if slot_uids && let Some(root) = dir.parent() {
        let m = std::fs::metadata(root)?.permissions().mode();
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(m | 0o111))?;
    }
    Ok(())
}

impl Runner for Restricted {
    fn mode(&self) -> IsolationMode {
        IsolationMode::Restricted
    }

    fn features(&self) -> &Features {
        &self.features
    }

    fn slots(&self) -> usize {
        self.cfg.slots
    }

    /// GPU runs are not offered in restricted mode.
    fn has_gpu(&self) -> bool {
        false
    }

    fn shared_dir(&self) -> Option<std::path::PathBuf> {
        self.cfg.shared_dir.clone()
    }

    /// Only when each slot runs as its own uid: files the executor (root) exported are then
    /// not the runs' to chmod.
    fn shares_files_read_only(&self) -> bool {
        self.slot_uids
    }

    fn work_dir(&self, slot: usize) -> Result<WorkDir, SandboxError> {
        let uid = self.run_uid(slot);
        Ok(WorkDir::directory(self.fresh_path("w"), uid, uid)?)
    }

    fn warm_starts(&self) -> bool {
        self.warm
    }

    fn start_zygotes(&self, zygotes: Vec<Arc<crate::ZygoteConfig>>) {
        if !self.warm || zygotes.is_empty() {
            return;
        }
        let all = self.zygotes.clone();
        let configs: Vec<_> = zygotes.into_iter().map(|c| (self.zygote_env(&c), c)).collect();
        let slots = self.cfg.slots;
        let started = std::thread::Builder::new().name("zygote-start".into()).spawn(move || {
            // One at a time: the executor's start-up and first runs keep a CPU.
            for (env, cfg) in &configs {
                for slot in 0..slots {
                    let launch = crate::zygote::Launch::Restricted { env };
                    if let Err(e) = all.ensure(slot, cfg, launch) {
                        tracing::warn!(slot, language = %cfg.name, error = %e, "could not start a zygote");
                        return;
                    }
                }
            }
        });
        if let Err(e) = started {
            tracing::warn!(error = %e, "zygotes start with each slot's first warm run");
        }
    }

    fn run<'a>(
        &'a self,
        slot: usize,
        work: &'a WorkDir,
        spec: &'a RunSpec,
    ) -> BoxFuture<'a, Result<RunOutcome, SandboxError>> {
        Box::pin(async move {
            match self.run_restricted(slot, work, spec).await {
                // The zygote's child failed before the program: nothing of it ran, so
                // the run starts again cold (the zygote is replaced for the next one).
                Err(SandboxError::WarmNotStarted(why)) => {
                    tracing::warn!(slot, error = %why, "warm start failed before the program; running it cold");
                    let cold = RunSpec {
                        warm: None,
                        ..spec.clone()
                    };
                    self.run_restricted(slot, work, &cold).await
                }
                other => other,
            }
        })
    }
}

/// A run's private temporary directory (`TMPDIR`, `HOME`), removed on drop.
struct TmpDir(PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        // As much as the run wrote there: not on an async worker (see `WorkDir`'s drop).
        crate::workdir::off_the_runtime(|| {
            if let Err(e) = std::fs::remove_dir_all(&self.0) {
                tracing::warn!(dir = %self.0.display(), error = %e, "could not remove a run's tmp dir");
            }
        });
    }
}

/// Rewrites `/work`, `/tmp` and [`crate::SHARED_PATH`] where they stand as whole path
/// components at the start of a word (`/tmp`, `HOME=/tmp`, `a:/work/x`, `"/work"`), to the
/// run's directories and the shared dir (`shared`, none when empty): in this mode the
/// program sees their real paths.
pub(crate) fn rewrite_paths(s: &str, work: &str, tmp: &str, shared: &str) -> String {
    const BEFORE: &[u8] = b":=\"' ,";
    const AFTER: &[u8] = b"/:\"' ,";
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let starts_word = i == 0 || BEFORE.contains(&b[i - 1]);
        let hit = [("/work", work), ("/tmp", tmp), (crate::SHARED_PATH, shared)]
            .into_iter()
            .find(|(from, to)| {
                !to.is_empty()
                    && b[i..].starts_with(from.as_bytes())
                    && b.get(i + from.len()).is_none_or(|c| AFTER.contains(c))
            });
        match hit {
            Some((from, to)) if starts_word => {
                out.push_str(to);
                i += from.len();
            }
            _ => {
                let ch = s[i..].chars().next().unwrap_or_default();
                out.push(ch);
                i += ch.len_utf8().max(1);
            }
        }
    }
    out
}

/// Replaced in a run's arguments by its memory limit in MiB: a runtime that sizes itself
/// from the machine's RAM (the JVM) can be told the limit, which no cgroup shows it here.
pub(crate) const MEMORY_LIMIT_MIB: &str = "{memory_limit_mib}";

/// A started run: killed, swept and reaped even if the run future is dropped.
struct Tree {
    leader: i32,
    /// A warm run's leader is its zygote's child, which the zygote reaps once told.
    release: Option<warm::Release>,
    done: bool,
}

impl Drop for Tree {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (leader, release) = (self.leader, self.release.take());
        // The leader is unreaped: the group's number is still the run's.
        accounting::kill_run(leader);
        std::thread::spawn(move || {
            accounting::sweep(leader, leader);
            // A warm run's zygote reaps its leader once `release` is gone.
            if release.is_none() {
                process::reap(leader);
            }
            drop(release);
        });
    }
}

/// Stack of the main thread, and default stack of every other thread.
const STACK_BYTES: u64 = 8 << 20;

/// Whether a failed run ran out of memory: with an rlimit instead of a
/// cgroup nobody says so, so a run that failed near its limit counts.
fn near_memory_limit(peak: u64, limit: u64) -> bool {
    peak >= limit / 4 * 3
}

impl Restricted {
    fn rlimits(&self, spec: &RunSpec, uid: u32) -> Vec<(libc::__rlimit_resource_t, libc::rlimit64)> {
        let l = &spec.limits;
        let cpu_s = l.cpu.as_secs() + u64::from(l.cpu.subsec_nanos() > 0);
        // RLIMIT_NPROC counts every task of the uid. With a uid per slot that
        // is the run's own; with the executor's uid shared, a run may add its
        // limit to what the uid has now (the executor's threads, other runs).
        let nproc = l.processes as u64
            + if self.slot_uids {
                0
            } else {
                accounting::tasks_of_uid(uid)
            };
        vec![
            // Per process; the /proc poll enforces the limit for the tree.
            (libc::RLIMIT_CPU, rlimit(cpu_s + 1, cpu_s + 2)),
            // Private writable memory: unlike RLIMIT_AS it leaves the address
            // space runtimes reserve (V8, the JVM, Go) alone.
            (libc::RLIMIT_DATA, rlimit(l.memory, l.memory)),
            (libc::RLIMIT_FSIZE, rlimit(l.file_size, l.file_size)),
            (libc::RLIMIT_NPROC, rlimit(nproc, nproc)),
            (libc::RLIMIT_CORE, rlimit(0, 0)),
            (libc::RLIMIT_NOFILE, rlimit(4096, 4096)),
            // glibc gives every new thread a stack of the soft limit, and
            // RLIMIT_DATA counts thread stacks whole: namespaces mode's 256 MiB
            // would let a runtime start one thread. 8 MiB, the usual Linux
            // default, bounds the main thread's recursion too (weaker than namespaces).
            (
                libc::RLIMIT_STACK,
                rlimit(STACK_BYTES.min(l.memory), STACK_BYTES.min(l.memory)),
            ),
            (libc::RLIMIT_MEMLOCK, rlimit(0, 0)),
            (libc::RLIMIT_MSGQUEUE, rlimit(0, 0)),
        ]
    }

    async fn run_restricted(&self, slot: usize, work: &WorkDir, spec: &RunSpec) -> Result<RunOutcome, SandboxError> {
        let uid = self.run_uid(slot);
        let warm_cfg = spec.warm.clone().filter(|_| self.warm);
        if let Some(cfg) = &warm_cfg {
            // Before the run's clock: a zygote's first start imports its modules.
            warm::ensure(&self.zygotes, slot, cfg, self.zygote_env(cfg))
                .await
                .map_err(|e| SandboxError::WarmNotStarted(e.to_string()))?;
        }
        let work_path = work
            .host_path()
            .ok_or_else(|| SandboxError::Other("restricted runs need a directory work dir".into()))?
            .to_owned();
        let tmp = TmpDir(self.fresh_path("t"));
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&tmp.0)
                .map_err(os("creating the run's tmp dir"))?;
            std::os::unix::fs::chown(&tmp.0, Some(uid), Some(uid)).map_err(os("handing the tmp dir to the run"))?;
        }
        let (w, t) = (work_path.to_string_lossy(), tmp.0.to_string_lossy());
        let shared = self
            .cfg
            .shared_dir
            .as_deref()
            .map(|d| d.to_string_lossy())
            .unwrap_or_default();
        let rewrite_paths = |s: &str| rewrite_paths(s, &w, &t, &shared);
        let argv0 = spec
            .argv
            .first()
            .ok_or_else(|| SandboxError::Other("empty command".into()))?;
        let exe = resolve_exe(&rewrite_paths(argv0));
        let rules = landlock::ruleset(
            self.landlock_abi,
            &landlock::Paths {
                read_exec: self.cfg.ro_paths.iter().chain(&self.cfg.shared_dir).cloned().collect(),
                read_write: vec![work_path.clone(), tmp.0.clone()],
            },
        )
        .map_err(|e| SandboxError::Other(e.to_string()))?;
        let rlimits = self.rlimits(spec, uid);
        let (out_r, out_w) = sys::pipe().map_err(os("pipe2"))?;
        let (err_r, err_w) = sys::pipe().map_err(os("pipe2"))?;
        let stdin = stdin_memfd(&spec.stdin)?;
        let memory_mib = (spec.limits.memory >> 20).to_string();
        let argv: Vec<String> = std::iter::once(rewrite_paths(argv0))
            .chain(
                spec.argv
                    .iter()
                    .skip(1)
                    .map(|a| rewrite_paths(a).replace(MEMORY_LIMIT_MIB, &memory_mib)),
            )
            .collect();
        let env: Vec<(String, String)> = spec.env.iter().map(|(k, v)| (k.clone(), rewrite_paths(v))).collect();

        let started = Instant::now();
        let mut warm_run = None;
        let mut tree = if let Some(cfg) = &warm_cfg {
            let req = warm::Request {
                argv: &argv,
                env: &env,
                cwd: &w,
                uid,
                rlimits: &rlimits,
                seccomp: &self.filters,
                stdio: [stdin, out_w, err_w, rules],
            };
            let mut run = warm::start(&self.zygotes, slot, cfg, req)
                .await
                .map_err(|e| SandboxError::WarmNotStarted(e.to_string()))?;
            let release = run.release().map_err(os("duplicating the run's socket"))?;
            let tree = Tree {
                leader: run.leader,
                release: Some(release),
                done: false,
            };
            // A child told nothing (the run dropped before this) never starts the program.
            run.go()
                .await
                .map_err(|e| SandboxError::WarmNotStarted(e.to_string()))?;
            warm_run = Some(run);
            tree
        } else {
            let confinement = spawn::Confinement {
                rlimits,
                landlock: rules,
                filters: self.filters.clone(),
                parent: std::process::id() as i32,
            };
            use std::os::unix::process::CommandExt;
            let mut cmd = std::process::Command::new(&exe);
            cmd.arg0(&argv[0])
                .args(&argv[1..])
                .env_clear()
                .envs(env.iter().map(|(k, v)| (k, v)))
                .current_dir(&work_path)
                .stdin(std::process::Stdio::from(stdin))
                .stdout(std::process::Stdio::from(out_w))
                .stderr(std::process::Stdio::from(err_w));
            if self.slot_uids {
                cmd.uid(uid).gid(uid);
            }
            confinement.attach(&mut cmd);
            let child = match self.spawner.spawn(cmd).await {
                Ok(c) => c,
                Err(e) => {
                    return Err(SandboxError::Exec {
                        exe: argv0.clone(),
                        errno: e,
                    });
                }
            };
            let leader = child.id() as i32;
            // std's handle would reap with waitpid; the tree's code reaps with wait4.
            drop(child);
            Tree {
                leader,
                release: None,
                done: false,
            }
        };
        let leader = tree.leader;
        let pidfd = process::pidfd_open(leader).map_err(|e| SandboxError::Os("pidfd_open", e))?;
        let handle = KillHandle::new(pidfd);
        let exited = handle.watch()?;
        let output = Output::read(out_r, err_r, spec.limits.output, handle.clone());

        let deadline = tokio::time::Instant::from_std(started + spec.limits.wall);
        let mut tick = tokio::time::interval(Duration::from_millis(25));
        let mut killed_by = None;
        let mut peak = accounting::Sample::default();
        {
            let exited = exited.readable();
            tokio::pin!(exited);
            loop {
                tokio::select! {
                    _ = &mut exited => break,
                    _ = tokio::time::sleep_until(deadline), if killed_by.is_none() => {
                        accounting::kill_run(leader);
                        killed_by = Some(Termination::WallTime);
                    }
                    _ = tick.tick() => {
                        let s = accounting::sample(leader);
                        peak.cpu = peak.cpu.max(s.cpu);
                        peak.rss = peak.rss.max(s.rss);
                        peak.rss_max = peak.rss_max.max(s.rss_max);
                        peak.data = peak.data.max(s.data);
                        if killed_by.is_none() && s.cpu >= spec.limits.cpu {
                            accounting::kill_run(leader);
                            killed_by = Some(Termination::CpuTime);
                        }
                    }
                }
            }
        }
        let wall = started.elapsed();
        drop(exited);
        drop(handle);
        // The leader has exited but is unreaped, so the group's number is
        // still this run's: kill what is left of the tree, reap it, then the leader
        // (a warm run's zygote reaps it, once told).
        let reap_leader = warm_run.is_none();
        let (status, mut ru) = tokio::task::spawn_blocking(move || {
            let mut total = accounting::sweep(leader, leader);
            let status = reap_leader.then(|| {
                let (status, ru) = process::reap(leader).unwrap_or((libc::SIGKILL, process::zero_rusage()));
                accounting::merge(&mut total, &ru);
                status
            });
            (status, total)
        })
        .await
        .map_err(|e| SandboxError::Other(format!("reaping a run: {e}")))?;
        let mut warm_started = false;
        let status = match (warm_run, status) {
            (Some(run), _) => {
                tree.done = true;
                let ended = run.finish().await;
                if !ended.started {
                    return Err(SandboxError::WarmNotStarted(
                        ended
                            .error
                            .unwrap_or_else(|| "the zygote's child ended before the program".into()),
                    ));
                }
                if !ended.reported {
                    return Err(SandboxError::Other(
                        "the zygote ended during the run (it is replaced for the next one)".into(),
                    ));
                }
                warm_started = true;
                let (status, leader_ru) = ended.status.unwrap_or((libc::SIGKILL, process::zero_rusage()));
                accounting::merge(&mut ru, &leader_ru);
                status
            }
            (None, Some(status)) => status,
            (None, None) => libc::SIGKILL,
        };
        tree.done = true;
        drop(tree);

        let Captured {
            stdout: (stdout, stdout_truncated),
            stderr: (stderr, stderr_truncated),
            overflowed,
        } = output.collect().await;
        if overflowed && killed_by.is_none() {
            killed_by = Some(Termination::Output);
        }
        drop(tmp);

        let cpu = cpu_time(&ru).max(peak.cpu);
        let (exit_code, signal) = exit_and_signal(Some(status));
        let peak_memory = (ru.ru_maxrss as u64 * 1024).max(peak.rss);
        let failed = exit_code != 0 || signal != 0;
        // Resident memory, not the data size: runtimes reserve far more than they touch. Of
        // one process, as the limit is per process: a fork bomb's members, each small and
        // sharing their parent's pages, summed to "near the limit" and read as out of memory.
        let largest = (ru.ru_maxrss as u64 * 1024).max(peak.rss_max);
        let oom_killed = failed && killed_by.is_none() && near_memory_limit(largest, spec.limits.memory);
        // As in namespaces mode: killed at the wall limit while busy on the CPU is a time limit.
        let cpu_bound = killed_by == Some(Termination::WallTime) && cpu.as_secs_f64() >= 0.5 * wall.as_secs_f64();
        let cpu_exceeded =
            cpu >= spec.limits.cpu || signal == libc::SIGXCPU || killed_by == Some(Termination::CpuTime) || cpu_bound;
        Ok(RunOutcome {
            exit_code,
            signal,
            killed_by,
            oom_killed,
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            wall,
            cpu,
            peak_memory,
            cpu_exceeded,
            warm: warm_started,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_rewritten_only_as_whole_leading_components() {
        let r = |s| rewrite_paths(s, "/r/w1", "/r/t1", "/r/shared");
        assert_eq!(r("/tmp"), "/r/t1");
        assert_eq!(r("/work/.gocache"), "/r/w1/.gocache");
        assert_eq!(r("/tmp/go:/usr/share/gocode"), "/r/t1/go:/usr/share/gocode");
        assert_eq!(
            r("{\"rootDir\": \"/work\", \"cacheDirectory\": \"/tmp/jest\"}"),
            "{\"rootDir\": \"/r/w1\", \"cacheDirectory\": \"/r/t1/jest\"}"
        );
        assert_eq!(
            r("-include/sandpool/shared/cpp/p.h"),
            "-include/sandpool/shared/cpp/p.h"
        );
        assert_eq!(
            r("-XX:SharedArchiveFile=/sandpool/shared/java/a.jsa"),
            "-XX:SharedArchiveFile=/r/shared/java/a.jsa"
        );
        assert_eq!(r("/sandpool/sharedx"), "/sandpool/sharedx");
        assert_eq!(
            rewrite_paths("/sandpool/shared/a", "/w", "/t", ""),
            "/sandpool/shared/a"
        );
        assert_eq!(r("/usr/tmp"), "/usr/tmp");
        assert_eq!(r("/workers"), "/workers");
        assert_eq!(r("/tmpfile"), "/tmpfile");
        assert_eq!(r("x/tmp"), "x/tmp");
        assert_eq!(r("main.py"), "main.py");
        assert_eq!(r("é/tmp ü"), "é/tmp ü");
    }

    #[test]
    fn memory_failures_count_only_near_the_limit() {
        assert!(near_memory_limit(100 << 20, 128 << 20));
        assert!(!near_memory_limit(20 << 20, 128 << 20));
    }
}
