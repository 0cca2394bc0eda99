//! Mode `namespaces`: each run gets fresh pid, mount, network, IPC, UTS and
//! cgroup namespaces, a read-only root with a private tmpfs `/work`, `/tmp` and
//! `/dev/shm`, a per-slot uid and cgroup, rlimits, `no_new_privs` and a seccomp
//! filter. The init of the pid namespace is the run's anchor: when it exits the
//! kernel kills everything the run started. Needs root or `CAP_SYS_ADMIN`.
//!
//! Set up once ([`Namespaces::new`]): the root template ([`rootfs`]), a
//! mount namespace per slot ([`slotns`]), slot cgroups ([`cgroup`]) with a
//! spawner inside each ([`spawner`]), network namespaces made ahead
//! ([`netns`]). Per run: [`supervise`] clones the init ([`child`]), which
//! sets up and starts the program, or has a slot's zygote fork it ([`zygote`]).
//!
//! Session seats ([`crate::Runner::seats`]) are identities beside the slots: a uid, a
//! cgroup made on the seat's first run and kept, and one mount namespace all seats copy
//! (seat runs are cold, so nothing is ever mounted in it). A seat has no spawner: a spawner
//! waits in `vfork` for as long as its run lasts, one thread in `D` state per idle session.
//! Its init is cloned from the executor instead, outside the seat's cgroup, and the program
//! moves itself in before it drops its privileges (see `child::prog_main`).

pub(crate) mod cgroup;
mod child;
mod cloner;
mod netns;
mod network;
pub(crate) mod rootfs;
mod slotns;
mod spawner;
mod supervise;
mod zygote_init;

use crate::config::cgroup_name;
use crate::runner::{BoxFuture, Runner};
use crate::sys::mount as mounts;
use crate::zygote;
use crate::{
    Features, IsolationMode, RunOutcome, RunSpec, SandboxConfig, SandboxError, WorkDir, probe, seccomp, workdir,
    workroot,
};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// A cgroup's CPU weight when nobody set one (v2's default; v1 `cpu.shares` 1024).
const DEFAULT_CPU_WEIGHT: u32 = 100;

/// The sandbox: everything set up once at start-up and shared by all runs.
#[derive(Debug)]
pub(crate) struct Namespaces {
    cfg: SandboxConfig,
    /// Released (by dropping) only after everything else here is gone.
    _lock: workroot::WorkRootLock,
    /// Per slot: a mount namespace rooted at the read-only template.
    slot_ns: Vec<Arc<OwnedFd>>,
    /// Per slot, on GPU executors: the same with the GPU device nodes.
    gpu_slot_ns: Vec<Arc<OwnedFd>>,
    /// Per slot: held by a run until its mounts are gone from the slot's namespace.
    slot_locks: Vec<Arc<tokio::sync::Mutex<()>>>,
    /// The namespace seat runs copy (never a slot's: a warm run may have mounts in those).
    seat_ns: Option<Arc<OwnedFd>>,
    /// Per seat: one run at a time.
    seat_locks: Vec<Arc<tokio::sync::Mutex<()>>>,
    /// Per seat, with cgroups: made on the seat's first run, kept for the next session in it.
    seat_cgroups: std::sync::Mutex<Vec<Option<Arc<cgroup::SlotCgroup>>>>,
    /// Per seat: its CPU weight ([`Runner::set_seat_cpu_weight`]), written into its cgroup
    /// when set and when the cgroup is made.
    seat_weights: Vec<AtomicU32>,
    /// Each seat's share of the seats' memory ceiling, with cgroups and a ceiling.
    seat_shares: Option<std::sync::Mutex<Shares>>,
    /// The thread seats' inits are cloned from (see [`cloner`]).
    seat_cloner: Option<Arc<cloner::SeatCloner>>,
    cgroups: Option<Vec<cgroup::SlotCgroup>>,
    hierarchy: Option<cgroup::Hierarchy>,
    /// Per slot, with cgroups: the process that clones inits inside the slot's cgroup.
    spawners: Vec<Arc<spawner::SlotSpawner>>,
    /// Fresh network namespaces, ready before the runs that take them (`namespace` only).
    netns: Option<netns::NetnsPool>,
    /// `seccomp` network isolation ([`network`]): the scope ruleset each run enforces.
    /// None: each run gets a network namespace.
    net_scope: Option<OwnedFd>,
    seccomp: Vec<Vec<libc::sock_filter>>,
    features: Features,
    /// Kernels before 6.15 only: where work dirs are attached to be cloned.
    staging: Option<std::sync::Arc<workdir::Staging>>,
    /// Per slot: the zygote warm runs fork from (started on a slot's first warm run).
    zygotes: Arc<zygote::Zygotes>,
    /// One set for all seats, in the seats' namespace: a seat's run lives as long as its
    /// session, so its zygote forks the next seat's while the last one runs.
    seat_zygotes: Arc<zygote::Zygotes>,
    /// The shared dir's tmpfs, detached from the host (runs see it through the template's
    /// bind; the executor writes it through `/proc/self/fd/N`): on the host's disk, the bind's
    /// source path would show in runs' mountinfo and name the work root.
    shared: Option<OwnedFd>,
}

impl Namespaces {
    /// Probes the kernel and sets up templates, cgroups and the seccomp filter.
    ///
    /// Refuses to start when the mode asks for more than the kernel or the
    /// executor's privileges allow.
    pub fn new(cfg: SandboxConfig) -> Result<Self, SandboxError> {
        cfg.expect_mode(IsolationMode::Namespaces)?;
        let mut features = probe::probe();
        if let Some(missing) = features.missing_for_namespaces() {
            return Err(SandboxError::ModeUnavailable("namespaces", missing));
        }
        // Before anything is reclaimed: a live executor's leftovers are not leftovers.
        let lock = workroot::WorkRootLock::acquire(&cfg.work_root)?;
        // Clear what a crashed executor left, then keep our mounts from
        // propagating to the host's other namespaces. Only below the root:
        // the root itself may be a mount (a pod's emptyDir) that is not ours.
        let mnt = workroot::mounts_dir(&cfg.work_root);
        mounts::detach_all(&mnt);
        std::fs::create_dir_all(&mnt).map_err(|e| SandboxError::Os("creating the mounts dir", e))?;
        mounts::mount(Some(&mnt), &mnt, None, libc::MS_BIND, None)
            .and_then(|_| mounts::mount(None, &mnt, None, libc::MS_PRIVATE, None))
            .map_err(|e| SandboxError::Os("making the mounts dir a private mount", e))?;

        // A tmpfs in the private mounts dir, bound into the templates, kept by a descriptor.
        let shared_mnt = mnt.join("shared");
        let shared = match &cfg.shared_dir {
            None => None,
            Some(_) => {
                std::fs::create_dir_all(&shared_mnt).map_err(|e| SandboxError::Os("creating the shared dir", e))?;
                mounts::tmpfs(&shared_mnt, "size=1g,mode=0755")
                    .map_err(|e| SandboxError::Os("mounting the shared dir's tmpfs", e))?;
                let fd = std::fs::File::open(&shared_mnt).map_err(|e| SandboxError::Os("opening the shared dir", e))?;
                Some(OwnedFd::from(fd))
            }
        };
        let shared_src = shared.as_ref().map(|_| shared_mnt.as_path());
        let (passwd, group) = passwd_files(cfg.uid_base, cfg.slots, cfg.seats);
        let base_devices: Vec<PathBuf> = rootfs::BASE_DEVICES.iter().map(PathBuf::from).collect();
        let root = rootfs::build(
            &mnt.join("root"),
            false,
            &cfg.ro_paths,
            shared_src,
            &base_devices,
            &passwd,
            &group,
        )?;
        let slot_ns = Self::slot_namespaces(&root.path, cfg.slots)?;
        // The seats' template has a mount point for their second /work (crate::SEAT_HOME),
        // which the slots' runs have no use for.
        let seat_ns = match cfg.seats {
            0 => None,
            _ => {
                let seat_root = rootfs::build(
                    &mnt.join("root-seat"),
                    true,
                    &cfg.ro_paths,
                    shared_src,
                    &base_devices,
                    &passwd,
                    &group,
                )?;
                Self::slot_namespaces(&seat_root.path, 1)?.pop()
            }
        };
        let gpu_slot_ns = if cfg.gpu_devices.is_empty() {
            vec![]
        } else {
            let devices: Vec<PathBuf> = base_devices.iter().chain(&cfg.gpu_devices).cloned().collect();
            let gpu = rootfs::build(
                &mnt.join("root-gpu"),
                false,
                &cfg.ro_paths,
                shared_src,
                &devices,
                &passwd,
                &group,
            )?;
            Self::slot_namespaces(&gpu.path, cfg.slots)?
        };
        // The slot namespaces hold their own copies: the host keeps nothing.
        mounts::detach_all(&mnt);
        let staging = workdir::Staging::if_needed(&cfg.work_root.join("attached"))
            .map_err(|e| SandboxError::Os("preparing work dir mounts", e))?
            .map(std::sync::Arc::new);

        let cgroups = cgroup::Hierarchy::setup(&cgroup_name(&cfg.work_root))
            .and_then(|h| Ok(((0..cfg.slots).map(|i| h.slot(i)).collect::<Result<Vec<_>, _>>()?, h)));
        if let Ok((_, h)) = &cgroups {
            // What a killed executor's sessions left runs on in their seats' cgroups.
            (cfg.slots..cfg.slots + cfg.seats).for_each(|i| h.kill_leftovers(i));
        }
        // The seats' parent, limited to their ceiling (docs/sessions.md, "Memory"). Its
        // failure (a killed executor's sessions still dying above the limit) costs the
        // ceiling, not the slots' cgroups: said loudly; the shares still bound each seat.
        if let (Ok((_, h)), 1..) = (&cgroups, cfg.seats)
            && let Err(e) = h.seats_ceiling(cfg.seat_memory.map(|m| m.ceiling))
        {
            tracing::error!(error = %e, "the session seats' memory ceiling could not be set");
        }
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
                let start = |(i, cg): (usize, &cgroup::SlotCgroup)| {
                    spawner::SlotSpawner::start(i, cg.procs_files()?).map(Arc::new)
                };
                slots
                    .iter()
                    .enumerate()
                    .map(start)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| SandboxError::Os("starting the slot spawners", e))?
            }
            None => vec![],
        };
        let landlock_abi = crate::sys::process::landlock_abi().unwrap_or(0);
        let network =
            network::choose(cfg.network, landlock_abi).map_err(|e| SandboxError::ModeUnavailable("namespaces", e))?;
        let (netns, net_scope) = match network {
            crate::NetworkIsolation::Seccomp => (
                None,
                Some(network::scope_ruleset().map_err(|e| SandboxError::ModeUnavailable("namespaces", e))?),
            ),
            _ => (
                netns::NetnsPool::start(cfg.slots.clamp(2, 16))
                    .map_err(|e| tracing::warn!(error = %e, "no network namespace factory; runs make their own"))
                    .ok(),
                None,
            ),
        };
        let unix_only = net_scope.is_some();
        let seccomp = seccomp::build_filters(unix_only)?
            .iter()
            .map(seccomp::to_kernel)
            .collect();
        for f in probe::NAMESPACES_NEEDS.iter().chain(&["no_new_privs"]) {
            features.set_in_use(f, true);
        }
        features.set_in_use("net_namespace", !unix_only);
        features.set_in_use("landlock", unix_only);
        tracing::info!(
            network_isolation = network.name(),
            asked = cfg.network.name(),
            landlock_abi,
            "runs are kept off the network by {}",
            if unix_only {
                "seccomp (unix sockets only) and Landlock scoping, without a network namespace"
            } else {
                "a network namespace of their own"
            }
        );
        let cfg_slots = cfg.slots;
        let seat_cloner = match cfg.seats {
            0 => None,
            _ => Some(Arc::new(
                cloner::SeatCloner::start().map_err(|e| SandboxError::Os("starting the seat cloner", e))?,
            )),
        };
        let sandbox = Namespaces {
            _lock: lock,
            slot_locks: (0..cfg.slots).map(|_| Arc::new(tokio::sync::Mutex::new(()))).collect(),
            seat_ns,
            seat_locks: (0..cfg.seats).map(|_| Arc::new(tokio::sync::Mutex::new(()))).collect(),
            seat_cgroups: std::sync::Mutex::new(vec![None; cfg.seats]),
            seat_weights: (0..cfg.seats).map(|_| AtomicU32::new(DEFAULT_CPU_WEIGHT)).collect(),
            seat_shares: match (&hierarchy, cfg.seat_memory, cfg.seats) {
                (Some(_), Some(m), 1..) => Some(std::sync::Mutex::new(Shares {
                    memory: m,
                    of: vec![0; cfg.seats],
                    lent: vec![false; cfg.seats],
                })),
                _ => None,
            },
            seat_cloner,
            cfg,
            slot_ns,
            gpu_slot_ns,
            cgroups,
            hierarchy,
            spawners,
            netns,
            net_scope,
            seccomp,
            features,
            staging,
            zygotes: Arc::new(zygote::Zygotes::new(cfg_slots)),
            seat_zygotes: Arc::new(zygote::Zygotes::new(1)),
            shared,
        };
        tracing::info!(mode = sandbox.cfg.mode.name(), features = %sandbox.features, "sandbox ready");
        Ok(sandbox)
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

    fn uid(&self, slot: usize) -> u32 {
        self.cfg.uid_base + slot as u32
    }
}

impl Runner for Namespaces {
    /// The isolation mode in force.
    fn mode(&self) -> IsolationMode {
        self.cfg.mode
    }

    /// What the kernel offers and what is in use.
    fn features(&self) -> &Features {
        &self.features
    }

    fn network_isolation(&self) -> crate::NetworkIsolation {
        match self.net_scope {
            Some(_) => crate::NetworkIsolation::Seccomp,
            None => crate::NetworkIsolation::Namespace,
        }
    }

    /// Number of run slots.
    fn slots(&self) -> usize {
        self.cfg.slots
    }

    fn seats(&self) -> usize {
        self.seat_locks.len()
    }

    fn set_seat_cpu_weight(&self, index: usize, weight: u32) -> bool {
        let Some(seat) = index.checked_sub(self.cfg.slots) else {
            return false;
        };
        let (Some(w), Some(_)) = (self.seat_weights.get(seat), self.hierarchy.as_ref()) else {
            return false;
        };
        w.store(weight, Ordering::Relaxed);
        let made = self
            .seat_cgroups
            .lock()
            .ok()
            .and_then(|v| v.get(seat).cloned().flatten());
        match made {
            Some(c) => c.set_cpu_weight(weight).unwrap_or_else(|e| {
                tracing::warn!(seat = index, error = %e, "setting a seat's CPU weight");
                false
            }),
            // Made on its first run, with the weight stored here.
            None => true,
        }
    }

    fn seat_busy(&self, index: usize) -> Option<bool> {
        let seat = index.checked_sub(self.cfg.slots)?;
        self.hierarchy.as_ref()?;
        match self.seat_cgroups.lock().ok()?.get(seat)? {
            Some(c) => Some(!c.is_empty()),
            // Made before a seat's first run starts: a seat without one never ran anything.
            None => Some(false),
        }
    }

    fn seat_share(&self, index: usize, share: crate::SeatShare) -> Option<u64> {
        let seat = index.checked_sub(self.cfg.slots)?;
        let mut shares = self.seat_shares.as_ref()?.lock().ok()?;
        let cgroups = self.seat_cgroups.lock().ok()?.clone();
        let cg = cgroups.get(seat).cloned().flatten();
        // Loans other seats hold give back what a start or a call is owed: the floor at
        // least, and all a call asks for (a loan is room nobody used; a call needs it now).
        let floor = shares.memory.floor;
        match share {
            crate::SeatShare::Grow(want) => shares.reclaim_loans(seat, want.max(floor), &cgroups),
            crate::SeatShare::Hold => shares.reclaim_loans(seat, floor, &cgroups),
            crate::SeatShare::Lend(_) | crate::SeatShare::Release => {}
        }
        let room = shares.room(seat);
        let now = *shares.of.get(seat)?;
        let new = match share {
            // Never below what it has: the others' shares left that room to it.
            crate::SeatShare::Grow(want) | crate::SeatShare::Lend(want) => want.min(room).max(now),
            crate::SeatShare::Hold => shares.hold(cg.as_ref().map_or(0, |c| c.memory_current()), room),
            crate::SeatShare::Release => 0,
        };
        let set = match (&cg, share) {
            // An empty seat: its next run's limit is set from the share when it starts.
            (Some(c), crate::SeatShare::Release) => c.set_cap(0, false, 0).ok(),
            (Some(c), _) => c
                .set_cap(new, true, SHARE_SLACK)
                .map_err(|e| tracing::warn!(seat, error = %e, "setting a seat's memory share"))
                .ok(),
            (None, _) => Some(new),
        }
        .unwrap_or(new);
        shares.of[seat] = set;
        shares.lent[seat] = matches!(share, crate::SeatShare::Lend(_));
        Some(set)
    }

    fn memory_in_use(&self, index: usize) -> Option<u64> {
        match index.checked_sub(self.cfg.slots) {
            None => self
                .cgroups
                .as_ref()?
                .get(index)
                .map(cgroup::SlotCgroup::memory_current),
            Some(seat) => {
                let c = self.seat_cgroups.lock().ok()?.get(seat).cloned().flatten()?;
                Some(c.memory_current())
            }
        }
    }

    /// True when GPU runs get device nodes.
    fn has_gpu(&self) -> bool {
        !self.gpu_slot_ns.is_empty()
    }

    /// Zygotes fork into a slot's cgroup through its spawner: not in the
    /// rlimit-only fallback without cgroups.
    fn warm_starts(&self) -> bool {
        self.cgroups.is_some() && !self.spawners.is_empty()
    }

    fn shared_dir(&self) -> Option<PathBuf> {
        use std::os::fd::AsRawFd;
        let fd = self.shared.as_ref()?;
        Some(PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd())))
    }

    fn start_zygotes(&self, zygotes: Vec<Arc<crate::ZygoteConfig>>) {
        if !self.warm_starts() || zygotes.is_empty() {
            return;
        }
        let (all, slots) = (self.zygotes.clone(), self.slot_ns.clone());
        let started = std::thread::Builder::new().name("zygote-start".into()).spawn(move || {
            // One at a time: the executor's start-up and first runs keep a CPU.
            for cfg in &zygotes {
                for (slot, ns) in slots.iter().enumerate() {
                    if let Err(e) = all.ensure(slot, cfg, zygote::Launch::MountNs(ns)) {
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

    fn start_seat_zygote(&self, cfg: Arc<crate::ZygoteConfig>) {
        let Some(ns) = self.seat_ns.clone().filter(|_| self.warm_starts()) else {
            return;
        };
        let all = self.seat_zygotes.clone();
        let started = std::thread::Builder::new().name("zygote-start".into()).spawn(move || {
            if let Err(e) = all.ensure(0, &cfg, zygote::Launch::MountNs(&ns)) {
                tracing::warn!(language = %cfg.name, error = %e, "could not start the seats' zygote");
            }
        });
        if let Err(e) = started {
            tracing::warn!(error = %e, "the seats' zygote starts with the first session");
        }
    }

    /// Creates a fresh work dir for a run in `slot`.
    fn work_dir(&self, slot: usize) -> Result<WorkDir, SandboxError> {
        let uid = self.uid(slot);
        Ok(WorkDir::create(self.cfg.work_dir_bytes, uid, uid)?.staged(self.staging.clone()))
    }

    /// Runs `spec` in slot `slot` with `work` mounted at `/work`.
    ///
    /// Every process the run started is dead when this returns. Dropping the
    /// future kills the run.
    fn run<'a>(
        &'a self,
        slot: usize,
        work: &'a WorkDir,
        spec: &'a RunSpec,
    ) -> BoxFuture<'a, Result<RunOutcome, SandboxError>> {
        Box::pin(self.run_in_slot(slot, work, spec))
    }
}

impl Namespaces {
    async fn run_in_slot(&self, slot: usize, work: &WorkDir, spec: &RunSpec) -> Result<RunOutcome, SandboxError> {
        match self.run_once(slot, work, spec).await {
            // The zygote broke before the program started: nothing of the
            // program ran, so the run is started again, cold (the zygote is
            // replaced for the next one).
            Err(SandboxError::WarmNotStarted(why)) => {
                tracing::warn!(slot, error = %why, "warm start failed before the program; running it cold");
                let cold = RunSpec {
                    warm: None,
                    ..spec.clone()
                };
                self.run_once(slot, work, &cold).await
            }
            other => other,
        }
    }

    async fn run_once(&self, slot: usize, work: &WorkDir, spec: &RunSpec) -> Result<RunOutcome, SandboxError> {
        if slot >= self.cfg.slots {
            return self.run_in_seat(slot, work, spec).await;
        }
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
            cloner: None,
            netns: self.netns.as_ref(),
            net_scope: self.net_scope.as_ref(),
            work,
            uid: self.uid(slot),
            cgroup: cg,
            seccomp: &self.seccomp,
            tmp_bytes: self.cfg.tmp_bytes,
            warm: Some(supervise::WarmSlot {
                zygotes: &self.zygotes,
                index: slot,
                seat: false,
            }),
            seat: false,
        };
        supervise::run(ctx, spec).await
    }
}

impl Namespaces {
    /// A run in seat `index` (`slots..slots + seats`), in the seat's own uid and cgroup; warm
    /// (forked from the seats' zygote) when the spec asks, never on a GPU.
    async fn run_in_seat(&self, index: usize, work: &WorkDir, spec: &RunSpec) -> Result<RunOutcome, SandboxError> {
        let seat = index - self.cfg.slots;
        let no_seat = || SandboxError::Other(format!("no seat {seat}"));
        let ns = self.seat_ns.as_ref().ok_or_else(no_seat)?;
        let lock = self.seat_locks.get(seat).ok_or_else(no_seat)?;
        let slot_guard = lock.clone().lock_owned().await;
        let cg = self.seat_cgroup(index).await?;
        if let (Some(c), Some(shares)) = (&cg, &self.seat_shares)
            && let Ok(mut shares) = shares.lock()
        {
            // A run starts with at least the floor, room allowed (an interpreter's start, a
            // bash call): never more than the share, which no run's limit exceeds.
            let floor = shares.memory.floor.min(shares.room(seat));
            if let Some(s) = shares.of.get_mut(seat) {
                *s = (*s).max(floor);
                let _ = c.set_cap(*s, false, 0);
            }
        }
        let ctx = supervise::Context {
            mnt_ns: ns,
            slot_guard,
            spawner: None,
            cloner: self.seat_cloner.as_ref(),
            netns: self.netns.as_ref(),
            net_scope: self.net_scope.as_ref(),
            work,
            uid: self.uid(index),
            cgroup: cg.as_deref(),
            seccomp: &self.seccomp,
            tmp_bytes: self.cfg.tmp_bytes,
            warm: self.warm_starts().then_some(supervise::WarmSlot {
                zygotes: &self.seat_zygotes,
                index: 0,
                seat: true,
            }),
            seat: true,
        };
        // Without a GPU whatever the spec asks: the seats' own namespace has no device nodes.
        supervise::run(ctx, spec).await
    }

    /// Seat `index`'s cgroup, made on first use (off the runtime's threads) and kept.
    async fn seat_cgroup(&self, index: usize) -> Result<Option<Arc<cgroup::SlotCgroup>>, SandboxError> {
        let Some(h) = self.hierarchy.clone() else {
            return Ok(None);
        };
        let seat = index - self.cfg.slots;
        let made = self
            .seat_cgroups
            .lock()
            .ok()
            .and_then(|v| v.get(seat).cloned().flatten());
        if let Some(c) = made {
            return Ok(Some(c));
        }
        let weight = self
            .seat_weights
            .get(seat)
            .map_or(DEFAULT_CPU_WEIGHT, |w| w.load(Ordering::Relaxed));
        let c = tokio::task::spawn_blocking(move || {
            let c = h.seat(index)?;
            // A reused directory keeps the last holder's weight: always written.
            if let Err(e) = c.set_cpu_weight(weight) {
                tracing::warn!(seat = index, error = %e, "setting a seat's CPU weight");
            }
            Ok::<_, crate::error::CgroupError>(c)
        })
        .await
        .map_err(|e| SandboxError::Other(format!("making a seat's cgroup: {e}")))??;
        let c = Arc::new(c);
        let mut all = self
            .seat_cgroups
            .lock()
            .map_err(|_| SandboxError::Other("seat cgroups: poisoned lock".into()))?;
        // One run per seat at a time (the caller holds its lock): nobody made it meanwhile.
        if let Some(entry) = all.get_mut(seat) {
            *entry = Some(c.clone());
        }
        Ok(Some(c))
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        // Leave the host as we found it: cgroups removed, mounts gone.
        self.spawners.clear();
        if let (Some(h), Some(slots)) = (&self.hierarchy, &self.cgroups) {
            slots.iter().for_each(cgroup::SlotCgroup::kill_all);
            if let Ok(seats) = self.seat_cgroups.lock() {
                seats.iter().flatten().for_each(|c| c.kill_all());
            }
            h.remove(slots.len() + self.seat_locks.len());
        }
        mounts::detach_all(&workroot::mounts_dir(&self.cfg.work_root));
    }
}

/// What a seat's share keeps above what it holds when its call ends ([`crate::SeatShare::Hold`]):
/// page cache and kernel memory an idle interpreter touches.
const SHARE_SLACK: u64 = 2 << 20;

/// The seats' shares of their ceiling (see [`crate::SeatMemory`]): they never add up past it.
#[derive(Debug)]
struct Shares {
    memory: crate::SeatMemory,
    /// Per seat, its share in bytes (its cgroup's memory limit is at most this).
    of: Vec<u64>,
    /// Per seat, whether what its share holds above its use is on loan ([`crate::SeatShare::Lend`]).
    lent: Vec<bool>,
}

impl Shares {
    /// What the ceiling leaves to seat `seat` beside the others' shares, each open seat's
    /// (a share above 0) counted at the floor at least: a seat that grows never takes the
    /// room another open seat is owed (a seat whose share was set while another had grown
    /// into everything got what it held plus 2 MiB, and an interpreter forked from the
    /// zygote holds little of its own pages).
    fn room(&self, seat: usize) -> u64 {
        let floor = self.memory.floor;
        let others: u64 = self
            .of
            .iter()
            .enumerate()
            .filter(|(i, s)| *i != seat && **s > 0)
            .map(|(_, s)| (*s).max(floor))
            .sum();
        self.memory.ceiling.saturating_sub(others)
    }

    /// A share at rest ([`crate::SeatShare::Hold`]) for a seat that holds `held` bytes with
    /// `room` to take: what it holds plus the slack, and the floor at least, room allowed.
    /// Not only what it holds: an idle interpreter forked from a zygote has most of its pages
    /// charged elsewhere, and its first touch of them after a cap at what it held killed it.
    fn hold(&self, held: u64, room: u64) -> u64 {
        held.saturating_add(SHARE_SLACK)
            .max(self.memory.floor.min(room))
            .min(room.max(held))
    }

    /// Takes back the loans of other seats ([`crate::SeatShare::Lend`]), each down to its
    /// share at rest ([`Shares::hold`]), until `seat` has `need` bytes of room (or no loan
    /// is left).
    fn reclaim_loans(&mut self, seat: usize, need: u64, cgroups: &[Option<Arc<cgroup::SlotCgroup>>]) {
        for j in 0..self.of.len() {
            if self.room(seat) >= need {
                return;
            }
            if j == seat || !self.lent[j] {
                continue;
            }
            self.lent[j] = false;
            let Some(c) = cgroups.get(j).cloned().flatten() else {
                continue;
            };
            let back = self.hold(c.memory_current(), self.room(j)).min(self.of[j]);
            match c.set_cap(back, true, SHARE_SLACK) {
                Ok(set) => self.of[j] = set,
                Err(e) => tracing::warn!(seat = j, error = %e, "taking back a seat's memory loan"),
            }
        }
    }
}

/// /etc/passwd and /etc/group naming every slot's uid `sandbox<i>`, and every session seat's
/// `user`, at home in [`crate::SEAT_HOME`] (E2B's user: `whoami`, `~` and `getpass` agree
/// with the sandboxes code for E2B was written in). A name may repeat: a uid finds its first.
fn passwd_files(uid_base: u32, slots: usize, seats: usize) -> (String, String) {
    let mut passwd =
        String::from("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    let mut group = String::from("root:x:0:\nnogroup:x:65534:\n");
    for i in 0..(slots + seats) as u32 {
        let id = uid_base + i;
        if (i as usize) < slots {
            passwd.push_str(&format!("sandbox{i}:x:{id}:{id}:sandbox:/tmp:/bin/sh\n"));
            group.push_str(&format!("sandbox{i}:x:{id}:\n"));
        } else {
            let home = crate::SEAT_HOME;
            passwd.push_str(&format!("user:x:{id}:{id}:user:{home}:/bin/bash\n"));
            group.push_str(&format!("user:x:{id}:\n"));
        }
    }
    (passwd, group)
}

#[cfg(test)]
mod tests {
    use super::Shares;

    #[test]
    fn room_keeps_every_open_seats_floor() {
        const MIB: u64 = 1 << 20;
        let shares = Shares {
            memory: crate::SeatMemory {
                ceiling: 300 * MIB,
                floor: 50 * MIB,
            },
            // Seat 1 is open below its floor (its share set when room was short), seat 2
            // grew, seats 0 and 3 are free.
            of: vec![0, 10 * MIB, 200 * MIB, 0],
            lent: vec![false; 4],
        };
        // Seat 1 is owed 50 MiB, not 10: seat 0 may take 300 - 50 - 200.
        assert_eq!(shares.room(0), 50 * MIB);
        // A seat's own share is not counted against it.
        assert_eq!(shares.room(2), 250 * MIB);
        // At rest, a seat holding little keeps the floor when the room is there.
        assert_eq!(shares.hold(MIB, shares.room(1)), 50 * MIB);
    }
}
