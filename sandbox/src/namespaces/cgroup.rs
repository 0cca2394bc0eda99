//! Per-slot cgroups: memory, process-count and CPU accounting for each run.
//!
//! One cgroup per run slot, created at start-up and reused: runs in a slot
//! never overlap, and every process of a run is dead before the slot is
//! released. Both cgroup v1 (memory, pids, cpuacct hierarchies, and cpu where it is
//! mounted apart, for weights) and the v2 unified hierarchy are supported.

use crate::error::CgroupError;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

const ROOT: &str = "/sys/fs/cgroup";

/// The parent of every session seat's cgroup, beside the slots' (see [`Hierarchy::seats_ceiling`]).
const SEATS: &str = "sessions";

/// Which cgroup hierarchy is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// The file a single-threaded process moves itself into a cgroup through, by writing
    /// `0`. On v1, `tasks`: moving the writer's own thread skips the global threadgroup
    /// lock that `cgroup.procs` takes, whose writer waits for an RCU grace period (6 to 17
    /// ms here, per run, once writes are a few ms apart; 0.04 ms through `tasks`). For a
    /// process of one thread it moves the same thing. On v2, `cgroup.threads` is only for
    /// threaded cgroups: `cgroup.procs`.
    fn join_file(self) -> &'static str {
        match self {
            Version::V1 => "tasks",
            Version::V2 => "cgroup.procs",
        }
    }

    /// Where the memory charged now is read: the hierarchy's index in a cgroup's
    /// directories, and the file.
    fn memory_current_file(self) -> (usize, &'static str) {
        match self {
            Version::V1 => (0, "memory.usage_in_bytes"),
            Version::V2 => (0, "memory.current"),
        }
    }

    /// Where a cgroup's CPU weight is set: v1 `cpu.shares` (in the cpu hierarchy, the
    /// fourth where it is mounted apart from cpuacct, else cpuacct's own), v2 `cpu.weight`.
    fn cpu_weight_file(self, dirs: &[PathBuf]) -> PathBuf {
        match self {
            Version::V1 => dirs.get(3).unwrap_or(&dirs[2]).join("cpu.shares"),
            Version::V2 => dirs[0].join("cpu.weight"),
        }
    }

    /// Where the CPU time used is read (v1 `cpuacct`, v2 `cpu.stat`), likewise.
    fn cpu_file(self) -> (usize, &'static str) {
        match self {
            Version::V1 => (2, "cpuacct.usage"),
            Version::V2 => (0, "cpu.stat"),
        }
    }
}

/// `file` (see [`Version::memory_current_file`]) among a cgroup's `dirs`.
fn path_in(dirs: &[PathBuf], (hierarchy, name): (usize, &str)) -> PathBuf {
    dirs[hierarchy].join(name)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io {
        path: path.to_owned(),
        source,
    }
}

fn write_file(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(io(path))
}

fn read_file(path: &Path) -> Result<String, CgroupError> {
    fs::read_to_string(path).map_err(io(path))
}

/// Reads `key value` from a flat-keyed cgroup file.
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The cgroup hierarchy this executor may use, if any.
#[derive(Debug, Clone)]
pub struct Hierarchy {
    pub version: Version,
    /// v1: one base per controller (memory, pids, cpuacct); v2: one base.
    bases: Vec<PathBuf>,
}

impl Hierarchy {
    /// Finds a writable hierarchy and creates the executor's base cgroup(s).
    ///
    /// `name` is the executor's own directory: distinct executors on one
    /// machine must use distinct names.
    pub fn setup(name: &str) -> Result<Self, CgroupError> {
        let root = Path::new(ROOT);
        if root.join("cgroup.controllers").exists() {
            make_writable(root);
            return Self::setup_v2(root, name);
        }
        let v1 = ["memory", "pids", "cpuacct"];
        if v1.iter().all(|c| root.join(c).join("cgroup.procs").exists()) {
            v1.iter().for_each(|c| make_writable(&root.join(c)));
            return Self::setup_v1(root, name);
        }
        Err(CgroupError::Unavailable)
    }

    fn own_path(controller: Option<&str>) -> String {
        let text = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, ctrls, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
            let matches = match controller {
                None => ctrls.is_empty(),
                Some(c) => ctrls.split(',').any(|x| x == c),
            };
            if matches {
                return path.trim_start_matches('/').to_owned();
            }
        }
        String::new()
    }

    fn setup_v1(root: &Path, name: &str) -> Result<Self, CgroupError> {
        let mut bases = vec![];
        // The cpu controller, for weights, where it is mounted apart from cpuacct (a joint
        // `cpu,cpuacct` mount has cpu.shares beside cpuacct.usage already).
        let canon = |c: &str| fs::canonicalize(root.join(c)).ok();
        let cpu_apart = root.join("cpu").join("cgroup.procs").exists() && canon("cpu") != canon("cpuacct");
        let ctrls: &[&str] = if cpu_apart {
            &["memory", "pids", "cpuacct", "cpu"]
        } else {
            &["memory", "pids", "cpuacct"]
        };
        if cpu_apart {
            make_writable(&root.join("cpu"));
        }
        for &ctrl in ctrls {
            let base = root.join(ctrl).join(Self::own_path(Some(ctrl))).join(name);
            fs::create_dir_all(&base).map_err(io(&base))?;
            bases.push(base);
        }
        Ok(Hierarchy {
            version: Version::V1,
            bases,
        })
    }

    fn setup_v2(root: &Path, name: &str) -> Result<Self, CgroupError> {
        let own = root.join(Self::own_path(None));
        let controllers = read_file(&own.join("cgroup.controllers"))?;
        if !["memory", "pids", "cpu"]
            .iter()
            .all(|c| controllers.split_whitespace().any(|x| x == *c))
        {
            return Err(CgroupError::Unavailable);
        }
        let base = own.join(name);
        fs::create_dir_all(&base).map_err(io(&base))?;
        delegate(&own)?;
        write_file(&base.join("cgroup.subtree_control"), V2_CONTROLLERS)?;
        Ok(Hierarchy {
            version: Version::V2,
            bases: vec![base],
        })
    }

    /// Creates (or resets) the cgroup of slot `index`, killing leftovers of a previous executor.
    pub fn slot(&self, index: usize) -> Result<SlotCgroup, CgroupError> {
        self.make(index, true)
    }

    /// As [`Hierarchy::slot`], for a session seat, below the seats' parent
    /// ([`Hierarchy::seats_ceiling`]): its files are opened when used, not kept
    /// open. Hundreds of seats' dozen descriptors each would sit in the executor's table,
    /// which every run's init copies when it is cloned and closes one by one.
    pub fn seat(&self, index: usize) -> Result<SlotCgroup, CgroupError> {
        self.make(index, false)
    }

    /// Makes the parent cgroup of every session seat and sets its memory limit: what all
    /// sessions hold together (their processes, and the tmpfs pages they wrote in `/work`,
    /// `/tmp`, `/dev/shm`) stays under `bytes`, whatever each was admitted at. None: no limit.
    pub fn seats_ceiling(&self, bytes: Option<u64>) -> Result<(), CgroupError> {
        for b in &self.bases {
            let d = b.join(SEATS);
            fs::create_dir_all(&d).map_err(io(&d))?;
        }
        let parent = self.bases[0].join(SEATS);
        let limit = bytes.map_or("max".to_owned(), |b| b.to_string());
        match self.version {
            Version::V1 => {
                let v1 = bytes.map_or("-1".to_owned(), |b| b.to_string());
                write_file(&parent.join("memory.limit_in_bytes"), &v1)?;
            }
            Version::V2 => {
                write_file(&parent.join("cgroup.subtree_control"), V2_CONTROLLERS)?;
                let _ = fs::write(parent.join("memory.swap.max"), "0");
                write_file(&parent.join("memory.max"), &limit)?;
            }
        }
        Ok(())
    }

    /// The directories of slot (or seat) `index`: seats (`index >= slots`) live below [`SEATS`].
    fn dirs_of(&self, index: usize, seat: bool) -> Vec<PathBuf> {
        let name = format!("slot-{index}");
        let parent = |b: &PathBuf| if seat { b.join(SEATS) } else { b.clone() };
        self.bases.iter().map(|b| parent(b).join(&name)).collect()
    }

    fn make(&self, index: usize, keep_open: bool) -> Result<SlotCgroup, CgroupError> {
        // Slots keep their files open; seats do not, and live below the seats' parent.
        let dirs = self.dirs_of(index, !keep_open);
        for d in &dirs {
            if d.exists() {
                kill_all(d);
            } else {
                fs::create_dir_all(d).map_err(io(d))?;
            }
        }
        let open_all = |name: &str| -> Result<Vec<File>, CgroupError> {
            match keep_open {
                true => dirs.iter().map(|d| open_rw(&d.join(name), false)).collect(),
                false => Ok(Vec::new()),
            }
        };
        let procs = open_all("cgroup.procs")?;
        // v2 joins through cgroup.procs too: `procs` serves both.
        let join = match self.version {
            Version::V1 => open_all(self.version.join_file())?,
            Version::V2 => Vec::new(),
        };
        if self.version == Version::V2 {
            // No swap for runs: set once, it never changes.
            let _ = fs::write(dirs[0].join("memory.swap.max"), "0");
        }
        // Opened once either way: it checks the files are there.
        let knobs = Knobs::open(self.version, &dirs)?;
        let knobs = keep_open.then_some(knobs);
        Ok(SlotCgroup {
            version: self.version,
            dirs,
            procs,
            join,
            knobs,
            written: Mutex::new(None),
            cap: AtomicU64::new(u64::MAX),
        })
    }

    /// Kills what is left in slot or seat `index`'s cgroup, if it exists (a killed
    /// executor's runs; a seat's either where seats live or where they lived before).
    pub fn kill_leftovers(&self, index: usize) {
        self.dirs_of(index, false)
            .into_iter()
            .chain(self.dirs_of(index, true))
            .filter(|d| d.exists())
            .for_each(|d| kill_all(&d));
    }

    /// Removes the slot and seat cgroups and the executor's base (all must be empty).
    pub fn remove(&self, slots: usize) {
        for i in 0..slots {
            for d in self.dirs_of(i, false).into_iter().chain(self.dirs_of(i, true)) {
                let _ = fs::remove_dir(d);
            }
        }
        for b in &self.bases {
            let _ = fs::remove_dir(b.join(SEATS));
            let _ = fs::remove_dir(b);
        }
    }
}

/// What the slot cgroups need from their parents on v2.
const V2_CONTROLLERS: &str = "+memory +pids +cpu";

/// Enables the slot controllers for the children of `own`, the executor's
/// cgroup. v2's "no internal processes" rule refuses that while `own` holds
/// processes (always so in a container's cgroup namespace, where `own` is
/// the namespace's root), so they move to a leaf `own/supervisor` first. The
/// host's root cgroup is exempt and takes the write at once.
fn delegate(own: &Path) -> Result<(), CgroupError> {
    let control = own.join("cgroup.subtree_control");
    match fs::write(&control, V2_CONTROLLERS) {
        Ok(()) => return Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
        Err(e) => return Err(io(&control)(e)),
    }
    let leaf = own.join("supervisor");
    fs::create_dir_all(&leaf).map_err(io(&leaf))?;
    for pid in read_file(&own.join("cgroup.procs"))?.lines().map(str::trim) {
        // A process that exited meanwhile needs no moving.
        if let Err(e) = fs::write(leaf.join("cgroup.procs"), pid) {
            tracing::debug!(pid, error = %e, "not moved to the supervisor leaf");
        }
    }
    write_file(&control, V2_CONTROLLERS)
}

/// Container runtimes mount the cgroup hierarchy read-only into
/// unprivileged containers. With CAP_SYS_ADMIN the executor makes its own
/// view writable: this changes the container's mount only, and the
/// container's cgroup still bounds everything below it.
fn make_writable(mount_point: &Path) {
    use nix::sys::statvfs::{FsFlags, statvfs};
    let Ok(st) = statvfs(mount_point) else { return };
    if !st.flags().contains(FsFlags::ST_RDONLY) {
        return;
    }
    // A bind remount sets the mount's flags anew: keep the ones it had.
    let kept = [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
        (FsFlags::ST_NOATIME, libc::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, libc::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, libc::MS_RELATIME),
    ]
    .iter()
    .filter(|(f, _)| st.flags().contains(*f))
    .fold(0, |acc, (_, m)| acc | m);
    let flags = libc::MS_REMOUNT | libc::MS_BIND | kept;
    match crate::sys::mount::mount(None, mount_point, None, flags, None) {
        Ok(()) => tracing::info!(path = %mount_point.display(), "made the read-only cgroup mount writable"),
        Err(e) => tracing::warn!(path = %mount_point.display(), error = %e, "cgroup mount is read-only"),
    }
}

/// SIGKILLs every process left in a cgroup directory.
fn kill_all(dir: &Path) {
    if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            // A pid read from our own cgroup.
            crate::sys::process::sigkill(pid);
        }
    }
}

/// One slot's cgroup (one directory per v1 controller, or one v2 directory).
#[derive(Debug)]
pub struct SlotCgroup {
    version: Version,
    dirs: Vec<PathBuf>,
    /// Kept open for a slot; empty for a seat (opened per use, see [`Hierarchy::seat`]).
    procs: Vec<File>,
    /// Likewise, the files a run's process moves itself in through ([`Version::join_file`]);
    /// empty on v2, where that is `procs`.
    join: Vec<File>,
    /// Likewise: None for a seat.
    knobs: Option<Knobs>,
    /// The memory and process limits last written: a run with the same ones
    /// (the common case) writes nothing.
    written: Mutex<Option<(u64, u32)>>,
    /// A seat's share of the seats' ceiling: no run's memory limit is set above it
    /// ([`SlotCgroup::set_cap`]); `u64::MAX` for a slot.
    cap: AtomicU64,
}

/// The slot's control and counter files, opened once: every run sets limits
/// and reads counters, and every CPU poll reads one, so paths are not
/// resolved and files not reopened per run or per poll. Reads and writes go
/// at offset 0 (cgroup files regenerate their content on each read from 0).
#[derive(Debug)]
struct Knobs {
    /// v1 memory.limit_in_bytes, v2 memory.max.
    memory_limit: File,
    pids_max: File,
    /// v1 cpuacct.usage, v2 cpu.stat.
    cpu: File,
    /// v1 memory.usage_in_bytes, v2 memory.current.
    memory_current: File,
    /// v1 memory.oom_control, v2 memory.events.
    oom: File,
    /// v1 memory.max_usage_in_bytes (written 0 to reset, read for the peak).
    max_usage: Option<File>,
}

fn open_rw(path: &Path, read: bool) -> Result<File, CgroupError> {
    OpenOptions::new().read(read).write(!read).open(path).map_err(io(path))
}

fn open_ro(path: &Path) -> Result<File, CgroupError> {
    File::open(path).map_err(io(path))
}

impl Knobs {
    fn open(version: Version, dirs: &[PathBuf]) -> Result<Self, CgroupError> {
        Ok(match version {
            Version::V1 => {
                let (m, p) = (&dirs[0], &dirs[1]);
                Knobs {
                    memory_limit: open_rw(&m.join("memory.limit_in_bytes"), false)?,
                    pids_max: open_rw(&p.join("pids.max"), false)?,
                    cpu: open_ro(&path_in(dirs, version.cpu_file()))?,
                    memory_current: open_ro(&path_in(dirs, version.memory_current_file()))?,
                    oom: open_ro(&m.join("memory.oom_control"))?,
                    max_usage: Some(
                        OpenOptions::new()
                            .read(true)
                            .write(true)
                            .open(m.join("memory.max_usage_in_bytes"))
                            .map_err(io(&m.join("memory.max_usage_in_bytes")))?,
                    ),
                }
            }
            Version::V2 => {
                let d = &dirs[0];
                Knobs {
                    memory_limit: open_rw(&d.join("memory.max"), false)?,
                    pids_max: open_rw(&d.join("pids.max"), false)?,
                    cpu: open_ro(&path_in(dirs, version.cpu_file()))?,
                    memory_current: open_ro(&path_in(dirs, version.memory_current_file()))?,
                    oom: open_ro(&d.join("memory.events"))?,
                    max_usage: None,
                }
            }
        })
    }
}

/// Writes `value` to an open cgroup file.
fn put(f: &File, value: &str) -> std::io::Result<()> {
    f.write_at(value.as_bytes(), 0).map(|_| ())
}

/// Reads a small cgroup file from its start into a stack buffer.
fn get(f: &File) -> Option<String> {
    let mut buf = [0u8; 1024];
    let n = f.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok().map(str::to_owned)
}

fn get_u64(f: &File) -> Option<u64> {
    let mut buf = [0u8; 32];
    let n = f.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

fn oom_kills_in(k: &Knobs) -> u64 {
    get(&k.oom).and_then(|s| keyed(&s, "oom_kill")).unwrap_or(0)
}

/// Counters read before a run, to report the run's own usage.
#[derive(Debug)]
pub struct Baseline {
    cpu_ns: u64,
    oom_kills: u64,
    peak: Option<File>,
    /// v2 without a resettable memory.peak (Linux before 6.12): the slot's all-time peak.
    peak_before: Option<u64>,
    /// Memory charged to the slot before the run (page cache of earlier runs).
    memory_before: u64,
}

/// What a run used, read from the cgroup after it ended.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub cpu_ns: u64,
    /// None when the cgroup cannot tell (see [`SlotCgroup::usage`]).
    pub peak_memory: Option<u64>,
    pub oom_killed: bool,
}

/// A slot's kept knobs, or a seat's opened for one use.
enum KnobsRef<'a> {
    Kept(&'a Knobs),
    Opened(Knobs),
}

impl std::ops::Deref for KnobsRef<'_> {
    type Target = Knobs;
    fn deref(&self) -> &Knobs {
        match self {
            KnobsRef::Kept(k) => k,
            KnobsRef::Opened(k) => k,
        }
    }
}

impl SlotCgroup {
    fn knobs(&self) -> Result<KnobsRef<'_>, CgroupError> {
        match &self.knobs {
            Some(k) => Ok(KnobsRef::Kept(k)),
            None => Knobs::open(self.version, &self.dirs).map(KnobsRef::Opened),
        }
    }

    fn memory(&self) -> &Path {
        &self.dirs[0]
    }
    fn pids(&self) -> &Path {
        if self.version == Version::V1 {
            &self.dirs[1]
        } else {
            &self.dirs[0]
        }
    }

    /// Copies of the slot's `cgroup.procs` descriptors, for the slot's spawner to move a
    /// replacement in with (writes are checked against the opener, root).
    pub(crate) fn procs_files(&self) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        self.files(&self.procs, "cgroup.procs")
    }

    /// The files a run's single-threaded process moves itself into the slot with, by
    /// writing `0` to each (a warm run's child, a seat's program): see [`Version::join_file`].
    pub(crate) fn join_files(&self) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        let kept = match self.version {
            Version::V1 => &self.join,
            Version::V2 => &self.procs,
        };
        self.files(kept, self.version.join_file())
    }

    /// Copies of `kept` (a slot's), or `name` in each hierarchy opened now (a seat's).
    fn files(&self, kept: &[File], name: &str) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        if self.knobs.is_none() {
            return self
                .dirs
                .iter()
                .map(|d| Ok(OpenOptions::new().write(true).open(d.join(name))?.into()))
                .collect();
        }
        kept.iter().map(|f| Ok(f.try_clone()?.into())).collect()
    }

    /// Sets the run's limits and records the counters to subtract afterwards.
    pub fn prepare(&self, memory: u64, processes: u32) -> Result<Baseline, CgroupError> {
        let memory = memory.min(self.cap.load(Ordering::Relaxed));
        let k = self.knobs()?;
        let k = &*k;
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let (last_memory, last_processes) = written.map_or((None, None), |(m, p)| (Some(m), Some(p)));
        if last_memory != Some(memory) {
            // Forgotten until it succeeds: a failed write leaves the old limit in doubt.
            *written = None;
            match self.version {
                Version::V1 => self.set_limit_v1(k, memory)?,
                Version::V2 => {
                    put(&k.memory_limit, &memory.to_string()).map_err(io(&self.memory().join("memory.max")))?
                }
            }
        }
        if last_processes != Some(processes) {
            *written = None;
            // The slot's spawner and the run's init are ours, not the program's.
            put(&k.pids_max, &(processes + 2).to_string()).map_err(io(&self.pids().join("pids.max")))?;
        }
        *written = Some((memory, processes));
        drop(written);
        if let Some(f) = &k.max_usage {
            // Resets the v1 high-water mark to the current usage.
            put(f, "0").map_err(io(&self.memory().join("memory.max_usage_in_bytes")))?;
        }
        let peak = match self.version {
            // Writing to memory.peak resets it for reads through this descriptor
            // (Linux 6.12): a descriptor of its own per run.
            Version::V2 => {
                let p = self.memory().join("memory.peak");
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&p)
                    .ok()
                    .and_then(|mut f| {
                        f.write_all(b"reset").ok()?;
                        Some(f)
                    })
            }
            Version::V1 => None,
        };
        let peak_before = match (&peak, self.version) {
            (None, Version::V2) => self.memory_peak(),
            _ => None,
        };
        Ok(Baseline {
            peak_before,
            memory_before: get_u64(&k.memory_current).unwrap_or(0),
            cpu_ns: self.cpu_ns_in(&k.cpu),
            oom_kills: oom_kills_in(k),
            peak,
        })
    }

    /// Sets the v1 memory limit. The kernel refuses (EBUSY) a limit below the
    /// slot's usage that it cannot reclaim down to; force_empty then reclaims
    /// all it can (page cache of earlier runs) before one more try.
    fn set_limit_v1(&self, k: &Knobs, memory: u64) -> Result<(), CgroupError> {
        let m = self.memory();
        let limit = m.join("memory.limit_in_bytes");
        let busy = |r: std::io::Result<()>| match r {
            Ok(()) => Ok(false),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(true),
            Err(e) => Err(io(&limit)(e)),
        };
        if !busy(put(&k.memory_limit, &memory.to_string()))? {
            return Ok(());
        }
        if let Err(e) = fs::write(m.join("memory.force_empty"), "0") {
            tracing::debug!(error = %e, "memory.force_empty");
        }
        if busy(put(&k.memory_limit, &memory.to_string()))? {
            return Err(CgroupError::LimitBelowUsage {
                limit: memory,
                usage: self.memory_current(),
            });
        }
        Ok(())
    }

    /// Sets a seat's share of the seats' ceiling: later runs' memory limits stay at or under
    /// `cap`, and with `now` the cgroup's limit is set to it at once (a running interpreter's
    /// too). A limit the kernel refuses (v1: below what it could reclaim to) is raised to
    /// what the cgroup holds plus `slack`, once. Answers the limit in force.
    pub(crate) fn set_cap(&self, cap: u64, now: bool, slack: u64) -> Result<u64, CgroupError> {
        self.cap.store(cap, Ordering::Relaxed);
        if !now {
            return Ok(cap);
        }
        let k = self.knobs()?;
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let processes = written.map(|(_, p)| p);
        *written = None;
        let file = match self.version {
            Version::V1 => self.memory().join("memory.limit_in_bytes"),
            Version::V2 => self.memory().join("memory.max"),
        };
        let mut set = cap;
        if let Err(e) = put(&k.memory_limit, &set.to_string()) {
            if e.raw_os_error() != Some(libc::EBUSY) {
                return Err(io(&file)(e));
            }
            set = self.memory_current().saturating_add(slack).max(cap);
            put(&k.memory_limit, &set.to_string()).map_err(io(&file))?;
            self.cap.store(set, Ordering::Relaxed);
        }
        *written = processes.map(|p| (set, p));
        Ok(set)
    }

    /// Memory charged to the slot now, in bytes.
    pub(crate) fn memory_current(&self) -> u64 {
        match &self.knobs {
            Some(k) => get_u64(&k.memory_current),
            // A seat's: the one file (the reaper reads every session's every 2 s).
            None => open_ro(&path_in(&self.dirs, self.version.memory_current_file()))
                .ok()
                .and_then(|f| get_u64(&f)),
        }
        .unwrap_or(0)
    }

    /// The slot's all-time memory peak (v2, Linux 5.19 and later).
    fn memory_peak(&self) -> Option<u64> {
        read_file(&self.memory().join("memory.peak")).ok()?.trim().parse().ok()
    }

    /// CPU time used by everything in the slot so far, in nanoseconds.
    pub fn cpu_ns(&self) -> u64 {
        match &self.knobs {
            Some(k) => self.cpu_ns_in(&k.cpu),
            // A seat's: the one file (a session's CPU is polled up to once a second).
            None => open_ro(&path_in(&self.dirs, self.version.cpu_file())).map_or(0, |f| self.cpu_ns_in(&f)),
        }
    }

    /// The CPU time in the cgroup's CPU file `cpu` (v1 cpuacct.usage, v2 cpu.stat), ns.
    fn cpu_ns_in(&self, cpu: &File) -> u64 {
        match self.version {
            Version::V1 => get_u64(cpu),
            Version::V2 => get(cpu).and_then(|s| keyed(&s, "usage_usec")).map(|u| u * 1000),
        }
        .unwrap_or(0)
    }

    /// What the run used since `prepare`.
    ///
    /// The peak is None where the cgroup cannot tell it: on v2 before Linux
    /// 6.12, memory.peak cannot be reset and is the slot's all-time peak, so it
    /// is this run's only when the run raised it.
    pub fn usage(&self, base: &mut Baseline) -> Usage {
        let Ok(k) = self.knobs() else {
            return Usage::default();
        };
        let peak_memory: Option<u64> = match (&base.peak, &k.max_usage) {
            (Some(f), _) | (None, Some(f)) => get_u64(f),
            (None, None) => self
                .memory_peak()
                .filter(|&now| base.peak_before.is_some_and(|b| now > b)),
        };
        Usage {
            cpu_ns: self.cpu_ns_in(&k.cpu).saturating_sub(base.cpu_ns),
            // Page cache charged by earlier runs in the slot is not this run's.
            peak_memory: peak_memory.map(|p| p.saturating_sub(base.memory_before)),
            oom_killed: oom_kills_in(&k) > base.oom_kills,
        }
    }

    /// True when no process is in the cgroup (in any of its v1 hierarchies).
    pub fn is_empty(&self) -> bool {
        self.dirs
            .iter()
            .all(|d| fs::read_to_string(d.join("cgroup.procs")).is_ok_and(|t| t.trim().is_empty()))
    }

    /// Sets the cgroup's CPU weight, in v2 `cpu.weight` units (1 to 10000, 100 the
    /// default every slot has); on v1 as `cpu.shares`, scaled (100 is 1024). Ok(false)
    /// where the hierarchy has no CPU weights (v1 without the cpu controller).
    pub fn set_cpu_weight(&self, weight: u32) -> Result<bool, CgroupError> {
        let path = self.version.cpu_weight_file(&self.dirs);
        if !path.exists() {
            return Ok(false);
        }
        let weight = weight.clamp(1, 10_000);
        let value = match self.version {
            Version::V1 => (u64::from(weight) * 1024 / 100).max(2),
            Version::V2 => u64::from(weight),
        };
        write_file(&path, &value.to_string()).map(|()| true)
    }

    /// Kills anything still in the slot (normally nothing is).
    pub fn kill_all(&self) {
        for d in &self.dirs {
            kill_all(d);
        }
    }
}

impl Baseline {
    /// The slot's CPU counter when the run started.
    pub fn cpu_ns(&self) -> u64 {
        self.cpu_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// make_writable turns a read-only mount writable, keeping its other flags
    /// (checked on a tmpfs in a private mount namespace: nothing on the host moves).
    #[test]
    fn a_read_only_mount_is_made_writable_with_its_flags_kept() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root (mount namespaces)");
            return;
        }
        std::thread::spawn(|| {
            use nix::sys::statvfs::{FsFlags, statvfs};
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare");
            crate::sys::mount::mount(None, Path::new("/"), None, libc::MS_REC | libc::MS_PRIVATE, None)
                .expect("private /");
            let dir = tempfile::tempdir().expect("tempdir");
            let m = dir.path();
            crate::sys::mount::tmpfs(m, "size=1m").expect("tmpfs");
            let ro =
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            crate::sys::mount::mount(None, m, None, ro, None).expect("remount ro");
            assert!(fs::write(m.join("x"), "x").is_err(), "the mount is read-only");

            make_writable(m);
            fs::write(m.join("x"), "x").expect("writable after make_writable");
            let flags = statvfs(m).expect("statvfs").flags();
            assert!(!flags.contains(FsFlags::ST_RDONLY));
            for f in [FsFlags::ST_NOSUID, FsFlags::ST_NODEV, FsFlags::ST_NOEXEC] {
                assert!(flags.contains(f), "{f:?} kept");
            }
            crate::sys::mount::detach_all(m);
        })
        .join()
        .expect("test thread");
    }
}
