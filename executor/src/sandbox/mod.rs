//! Isolation and limits for one run: the sandbox.
//!
//! Mode `namespaces` (the only one so far): each run gets fresh pid, mount,
//! network, IPC, UTS and cgroup namespaces, a read-only root with a private tmpfs
//! `/work`, `/tmp` and `/dev/shm`, a per-slot uid and cgroup, rlimits,
//! `no_new_privs` and a seccomp filter. The init of the pid namespace is the
//! run's anchor: when it exits the kernel kills everything the run started.
//!
//! Submodules: [`probe`] finds what the kernel allows, [`rootfs`] builds the
//! root template, [`workdir`] the per-run tmpfs, [`cgroup`] the slot cgroups,
//! [`netns`] the network namespaces made ahead of runs, [`seccomp`] the filter, [`child`] and [`sys`] the post-clone code, and
//! [`supervise`] watches a run from the outside.

pub mod cgroup;
mod child;
mod mounts;
mod netns;
pub mod probe;
pub mod rootfs;
pub mod seccomp;
mod slotns;
mod spawner;
mod supervise;
mod sys;
pub mod workdir;

pub use probe::{Feature, Features};
pub use supervise::{RunOutcome, Termination};
pub use workdir::{FetchError, WorkDir, WorkDirError};

use crate::limits::Limits;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How runs are isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IsolationMode {
    /// Fresh namespaces, cgroups, seccomp and an unprivileged uid per run (needs root or CAP_SYS_ADMIN).
    Namespaces,
    /// For pods without extra privileges (rlimits, seccomp, landlock); not available yet.
    Restricted,
}

impl IsolationMode {
    /// The mode's name as reported to clients.
    pub fn name(self) -> &'static str {
        match self {
            IsolationMode::Namespaces => "namespaces",
            IsolationMode::Restricted => "restricted",
        }
    }
}

/// Sandbox settings, from the executor's flags.
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    pub mode: IsolationMode,
    /// Where work dirs and the root template live (root-owned, private).
    pub work_root: PathBuf,
    /// Host paths the sandbox sees read-only.
    pub ro_paths: Vec<PathBuf>,
    /// Number of run slots; each has its own uid and cgroup.
    pub slots: usize,
    /// uid (and gid) of slot 0; slot i runs as `uid_base + i`.
    pub uid_base: u32,
    /// Device nodes given to GPU runs (empty: no GPU).
    pub gpu_devices: Vec<PathBuf>,
    /// Size cap of each run's work dir.
    pub work_dir_bytes: u64,
    /// Size cap of each run's /tmp and /dev/shm.
    pub tmp_bytes: u64,
}

/// Errors of the sandbox itself (never the program's fault).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("isolation mode {0} is not available: {1}")]
    ModeUnavailable(&'static str, String),
    #[error(transparent)]
    Rootfs(#[from] rootfs::RootfsError),
    #[error(transparent)]
    Cgroup(#[from] cgroup::CgroupError),
    #[error(transparent)]
    Seccomp(#[from] seccomp::SeccompError),
    #[error(transparent)]
    WorkDir(#[from] WorkDirError),
    #[error("{0}: {1}")]
    Os(&'static str, std::io::Error),
    #[error("sandbox setup failed while {stage}: {errno}")]
    Setup { stage: &'static str, errno: std::io::Error },
    #[error("could not start {exe}: {errno}")]
    Exec { exe: String, errno: std::io::Error },
    #[error("{0}")]
    Other(String),
}

impl SandboxError {
    /// The error as clients may see it: host paths (cgroup directories, the
    /// work root) stay in the executor's log.
    pub fn client_message(&self) -> String {
        match self {
            SandboxError::Cgroup(_) => "the run's cgroup could not be prepared (details in the executor's log)".into(),
            SandboxError::Rootfs(_) => "the sandbox root could not be built (details in the executor's log)".into(),
            other => other.to_string(),
        }
    }
}

/// What one run executes.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Program and arguments; a bare name is looked up in the sandbox's PATH.
    pub argv: Vec<String>,
    /// The complete environment (nothing is inherited).
    pub env: Vec<(String, String)>,
    pub stdin: Vec<u8>,
    pub limits: Limits,
    /// Gives the run the GPU device nodes.
    pub gpu: bool,
}

/// The sandbox: everything set up once at start-up and shared by all runs.
#[derive(Debug)]
pub struct Sandbox {
    cfg: SandboxConfig,
    /// Per slot: a mount namespace rooted at the read-only template.
    slot_ns: Vec<Arc<OwnedFd>>,
    /// Per slot, on GPU executors: the same with the GPU device nodes.
    gpu_slot_ns: Vec<Arc<OwnedFd>>,
    /// Per slot: held by a run until its mounts are gone from the slot's namespace.
    slot_locks: Vec<Arc<tokio::sync::Mutex<()>>>,
    cgroups: Option<Vec<cgroup::SlotCgroup>>,
    hierarchy: Option<cgroup::Hierarchy>,
    /// Per slot, with cgroups: the process that clones inits inside the slot's cgroup.
    spawners: Vec<spawner::Spawner>,
    /// Fresh network namespaces, ready before the runs that take them.
    netns: Option<netns::NetnsPool>,
    seccomp: Vec<Vec<libc::sock_filter>>,
    features: Features,
    /// Kernels before 6.15 only: where work dirs are attached to be cloned.
    staging: Option<std::sync::Arc<workdir::Staging>>,
}

/// Directory (inside the sandbox) where runs start.
pub const WORK_DIR: &str = "/work";

/// PATH inside the sandbox: where a bare program name is looked up, and runs' default PATH.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl Sandbox {
    /// Probes the kernel and sets up templates, cgroups and the seccomp filter.
    ///
    /// Refuses to start when the mode asks for more than the kernel or the
    /// executor's privileges allow.
    pub fn new(cfg: SandboxConfig) -> Result<Self, SandboxError> {
        if cfg.mode == IsolationMode::Restricted {
            return Err(SandboxError::ModeUnavailable(
                "restricted",
                "not implemented in this version; use namespaces".into(),
            ));
        }
        let mut features = probe::probe();
        if let Some(missing) = features.missing_for_namespaces() {
            return Err(SandboxError::ModeUnavailable("namespaces", missing));
        }
        std::fs::create_dir_all(&cfg.work_root).map_err(|e| SandboxError::Os("creating the work root", e))?;
        // Clear what a crashed executor left, then keep our mounts from
        // propagating to the host's other namespaces.
        mounts::detach_all(&cfg.work_root);
        mounts::mount(Some(&cfg.work_root), &cfg.work_root, None, libc::MS_BIND, None)
            .and_then(|_| mounts::mount(None, &cfg.work_root, None, libc::MS_PRIVATE, None))
            .map_err(|e| SandboxError::Os("making the work root a private mount", e))?;

        let (passwd, group) = passwd_files(cfg.uid_base, cfg.slots);
        let base_devices: Vec<PathBuf> = rootfs::BASE_DEVICES.iter().map(PathBuf::from).collect();
        let root = rootfs::build(
            &cfg.work_root.join("root"),
            &cfg.ro_paths,
            &base_devices,
            &passwd,
            &group,
        )?;
        let slot_ns = Self::slot_namespaces(&root.path, cfg.slots)?;
        let gpu_slot_ns = if cfg.gpu_devices.is_empty() {
            vec![]
        } else {
            let devices: Vec<PathBuf> = base_devices.iter().chain(&cfg.gpu_devices).cloned().collect();
            let gpu = rootfs::build(
                &cfg.work_root.join("root-gpu"),
                &cfg.ro_paths,
                &devices,
                &passwd,
                &group,
            )?;
            Self::slot_namespaces(&gpu.path, cfg.slots)?
        };
        // The slot namespaces hold their own copies: the host keeps nothing.
        mounts::detach_all(&cfg.work_root);
        let staging = workdir::Staging::if_needed(&cfg.work_root.join("attached"))
            .map_err(|e| SandboxError::Os("preparing work dir mounts", e))?
            .map(std::sync::Arc::new);

        let cgroups = cgroup::Hierarchy::setup(&cgroup_name(&cfg.work_root))
            .and_then(|h| Ok(((0..cfg.slots).map(|i| h.slot(i)).collect::<Result<Vec<_>, _>>()?, h)));
        let (cgroups, hierarchy) = match cgroups {
            Ok((slots, h)) => {
                let name = if h.version == cgroup::Version::V1 {
                    "cgroup_v1"
                } else {
                    "cgroup_v2"
                };
                features.set_in_use(name, true);
                (Some(slots), Some(h))
            }
            Err(e) => {
                tracing::warn!(error = %e, "cgroups unavailable; memory and process limits fall back to rlimits");
                (None, None)
            }
        };
        let spawners = match &cgroups {
            Some(slots) => {
                let spawners = spawner::Spawner::start_many(slots.len())
                    .map_err(|e| SandboxError::Os("starting the slot spawners", e))?;
                for (sp, cg) in spawners.iter().zip(slots) {
                    cg.adopt(sp.pid())?;
                }
                spawners
            }
            None => vec![],
        };
        let netns = netns::NetnsPool::start(cfg.slots.clamp(2, 16))
            .map_err(|e| tracing::warn!(error = %e, "no network namespace factory; runs make their own"))
            .ok();
        let seccomp = seccomp::build_filters()?.iter().map(seccomp::to_kernel).collect();
        for f in [
            "pid_namespace",
            "mount_namespace",
            "net_namespace",
            "ipc_namespace",
            "uts_namespace",
            "seccomp",
            "no_new_privs",
        ] {
            features.set_in_use(f, true);
        }
        let sandbox = Sandbox {
            slot_locks: (0..cfg.slots).map(|_| Arc::new(tokio::sync::Mutex::new(()))).collect(),
            cfg,
            slot_ns,
            gpu_slot_ns,
            cgroups,
            hierarchy,
            spawners,
            netns,
            seccomp,
            features,
            staging,
        };
        tracing::info!(mode = sandbox.cfg.mode.name(), features = %sandbox.features, "sandbox ready");
        Ok(sandbox)
    }

    /// The isolation mode in force.
    pub fn mode(&self) -> IsolationMode {
        self.cfg.mode
    }

    /// What the kernel offers and what is in use.
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// Number of run slots.
    pub fn slots(&self) -> usize {
        self.cfg.slots
    }

    /// True when GPU runs get device nodes.
    pub fn has_gpu(&self) -> bool {
        !self.gpu_slot_ns.is_empty()
    }

    fn slot_namespaces(template: &Path, slots: usize) -> Result<Vec<Arc<OwnedFd>>, SandboxError> {
        (0..slots)
            .map(|_| {
                slotns::create(template)
                    .map(Arc::new)
                    .map_err(|e| SandboxError::Os("creating a slot's mount namespace", e))
            })
            .collect()
    }

    /// Creates a fresh work dir for a run in `slot`.
    pub fn work_dir(&self, slot: usize) -> Result<WorkDir, SandboxError> {
        let uid = self.uid(slot);
        Ok(WorkDir::create(self.cfg.work_dir_bytes, uid, uid)?.staged(self.staging.clone()))
    }

    fn uid(&self, slot: usize) -> u32 {
        self.cfg.uid_base + slot as u32
    }

    /// Runs `spec` in slot `slot` with `work` mounted at `/work`.
    ///
    /// Every process the run started is dead when this returns. Dropping the
    /// future kills the run.
    pub async fn run(&self, slot: usize, work: &WorkDir, spec: &RunSpec) -> Result<RunOutcome, SandboxError> {
        let cg = self.cgroups.as_ref().and_then(|c| c.get(slot));
        let namespaces = if spec.gpu && self.has_gpu() {
            &self.gpu_slot_ns
        } else {
            &self.slot_ns
        };
        let mnt_ns = namespaces
            .get(slot)
            .ok_or_else(|| SandboxError::Other(format!("no slot {slot}")))?;
        let lock = self
            .slot_locks
            .get(slot)
            .ok_or_else(|| SandboxError::Other(format!("no slot {slot}")))?;
        // Waits only while a cancelled run's mounts are being cleared.
        let slot_guard = lock.clone().lock_owned().await;
        let ctx = supervise::Context {
            mnt_ns,
            slot_guard,
            spawner: self.spawners.get(slot),
            netns: self.netns.as_ref(),
            work,
            uid: self.uid(slot),
            cgroup: cg,
            seccomp: &self.seccomp,
            tmp_bytes: self.cfg.tmp_bytes,
        };
        supervise::run(ctx, spec).await
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Leave the host as we found it: cgroups removed, mounts gone.
        self.spawners.clear();
        if let (Some(h), Some(slots)) = (&self.hierarchy, &self.cgroups) {
            slots.iter().for_each(cgroup::SlotCgroup::kill_all);
            h.remove(slots.len());
        }
        mounts::detach_all(&self.cfg.work_root);
    }
}

/// A close-on-exec pipe: (read end, write end).
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// The cgroup directory name of the executor using `work_root`: distinct
/// executors on one machine (tests, several pods' worth) need distinct ones.
pub fn cgroup_name(work_root: &Path) -> String {
    // FNV-1a: stable across runs, so a restarted executor reclaims its own.
    let hash = work_root
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf29ce484222325u64, |h, b| {
            (h ^ *b as u64).wrapping_mul(0x100000001b3)
        });
    format!("sandpool-{:08x}", hash as u32)
}

/// /etc/passwd and /etc/group naming every slot's uid `sandbox`.
fn passwd_files(uid_base: u32, slots: usize) -> (String, String) {
    let mut passwd =
        String::from("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    let mut group = String::from("root:x:0:\nnogroup:x:65534:\n");
    for i in 0..slots as u32 {
        let id = uid_base + i;
        passwd.push_str(&format!("sandbox{i}:x:{id}:{id}:sandbox:/tmp:/bin/sh\n"));
        group.push_str(&format!("sandbox{i}:x:{id}:\n"));
    }
    (passwd, group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_never_show_host_cgroup_paths() {
        let e = SandboxError::Cgroup(cgroup::CgroupError::Io {
            path: "/sys/fs/cgroup/memory/kubepods/pod1234/sandpool-1/slot-0/memory.limit_in_bytes".into(),
            source: std::io::Error::from_raw_os_error(libc::EBUSY),
        });
        assert!(e.to_string().contains("/sys/fs/cgroup"), "the log keeps the path");
        assert!(!e.client_message().contains("/sys/fs/cgroup"), "{}", e.client_message());
        assert!(!e.client_message().contains("sandpool-1"), "{}", e.client_message());
    }
}
