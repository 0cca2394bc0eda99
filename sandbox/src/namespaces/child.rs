//! The child side of a sandboxed run: the namespace init and the program.
//!
//! Everything here runs after `clone`, sharing the executor's memory, so it
//! uses only [`sys`] raw calls and data prepared beforehand in [`ChildPlan`]:
//! no allocation, no locks, no `errno`.

use crate::sys::raw as sys;
use crate::sys::stack::Stack;
use report::Stage;
use std::ffi::CString;

/// One mount performed by the init inside the new mount namespace.
pub(crate) struct MountStep {
    pub src: Option<CString>,
    pub target: CString,
    pub fstype: Option<CString>,
    pub flags: u64,
    pub data: Option<CString>,
}

/// Everything the init and the program need, prepared before `clone`.
pub(crate) struct ChildPlan {
    /// The init's pid, written by the kernel (CLONE_PARENT_SETTID) when a spawner clones it.
    pub spawned_pid: std::sync::atomic::AtomicI32,
    /// A failed setup step, `stage << 32 | errno` (0: none), as the report says it: read
    /// when the report is missing (see [`fail`]). Seen only where the init shares our memory.
    pub setup_failed: std::sync::atomic::AtomicU64,
    /// Where the init sends `(pid, 0)` for its spawner, which waits for it (vfork); -1: not spawned.
    pub spawn_resp_fd: i32,
    /// The init dies with the thread that clones it (`PR_SET_PDEATHSIG`): one that lives as
    /// long as the executor (a spawner's waiting thread, the seat cloner's).
    pub die_with_parent: bool,
    pub keep_fds: Vec<i32>,
    /// The slot's mount namespace (root = the read-only template).
    pub mnt_ns_fd: i32,
    /// A fresh network namespace to enter, or -1: clone made one (loopback still down).
    pub net_ns_fd: i32,
    /// No network namespace (`--network-isolation seccomp`): the run stays in the host's,
    /// kept off it by the seccomp filter and Landlock scoping.
    pub host_net: bool,
    /// The Landlock ruleset the program enforces on itself (scoping abstract unix sockets
    /// and signals to the run), or -1: none.
    pub landlock_fd: i32,
    /// Detached clone of the run's work-dir mount, attached at /work.
    pub work_fd: i32,
    /// Per-run mounts inside the slot namespace, after /work.
    pub mounts: Vec<MountStep>,
    /// Mount points the init clears before and after the run.
    pub run_mount_points: Vec<CString>,
    pub hostname: &'static [u8],
    pub stdin_fd: i32,
    pub stdout_fd: i32,
    pub stderr_fd: i32,
    pub report_fd: i32,
    pub uid: u32,
    pub gid: u32,
    pub rlimits: Vec<(u32, libc::rlimit64)>,
    pub seccomp: Vec<Vec<libc::sock_filter>>,
    pub cwd: CString,
    pub exe: CString,
    pub _argv: Vec<CString>,
    pub argv_ptrs: Vec<*const libc::c_char>,
    pub _envp: Vec<CString>,
    pub envp_ptrs: Vec<*const libc::c_char>,
    pub prog_stack: Stack,
    /// Warm runs: the init's end of its channel to the supervisor; the init
    /// starts no program (a zygote forks it, see `zygote`). -1: a cold run.
    pub warm_ctl_fd: i32,
    /// Warm runs: where the init says it is ready (read by the zygote's child).
    pub warm_ready_fd: i32,
    /// Warm runs in a seat: the init mounts the run in a mount namespace of its own (as a
    /// cold run does), since every seat shares `mnt_ns_fd`; a slot's warm run mounts in
    /// the slot's namespace itself.
    pub warm_own_mount_ns: bool,
    /// Seat runs (no spawner in the cgroup): the cgroup's `cgroup.procs` files, which the
    /// program writes itself into before anything else, then takes a cgroup namespace
    /// rooted there. Empty: the program starts in its init's cgroup.
    pub join_cgroup_fds: Vec<i32>,
}

// SAFETY: the raw pointers point into the CStrings owned by the same plan.
unsafe impl Send for ChildPlan {}
// SAFETY: as for Send; nothing mutates through a shared plan but the atomic.
unsafe impl Sync for ChildPlan {}

/// What the init reports through the report pipe (12 bytes each).
pub(crate) mod report {
    /// Setup step `stage` failed with errno `value`.
    pub const SETUP_FAILED: u32 = 1;
    /// execve of the program failed with errno `value`.
    pub const EXEC_FAILED: u32 = 2;
    /// The program ended with wait status `value`.
    pub const STATUS: u32 = 3;

    /// A step of the set-up between clone and exec; reported by code when it fails.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Stage {
        CloseFds,
        EnterMountNs,
        NewMountNs,
        AttachWork,
        /// The i-th of the plan's per-run mounts.
        Mount(u32),
        Hostname,
        EnterNetNs,
        StartProgram,
        Streams,
        Session,
        Groups,
        Gid,
        Uid,
        Rlimits,
        NoNewPrivs,
        Seccomp,
        Chdir,
        JoinCgroup,
        Landlock,
    }

    impl Stage {
        /// The code sent through the report pipe.
        pub const fn code(self) -> u32 {
            match self {
                Stage::CloseFds => 1,
                Stage::EnterMountNs => 3,
                Stage::NewMountNs => 5,
                Stage::AttachWork => 4,
                Stage::Hostname => 8,
                Stage::EnterNetNs => 9,
                Stage::StartProgram => 10,
                Stage::Streams => 20,
                Stage::Session => 21,
                Stage::Groups => 22,
                Stage::Gid => 23,
                Stage::Uid => 24,
                Stage::Rlimits => 25,
                Stage::NoNewPrivs => 26,
                Stage::Seccomp => 27,
                Stage::Chdir => 28,
                Stage::JoinCgroup => 29,
                Stage::Landlock => 30,
                Stage::Mount(i) => 100 + i,
            }
        }

        /// Human-readable name of the stage with report code `code`.
        pub fn name_of(code: u32) -> &'static str {
            const ALL: [Stage; 18] = [
                Stage::CloseFds,
                Stage::EnterMountNs,
                Stage::NewMountNs,
                Stage::AttachWork,
                Stage::Hostname,
                Stage::EnterNetNs,
                Stage::StartProgram,
                Stage::Streams,
                Stage::Session,
                Stage::Groups,
                Stage::Gid,
                Stage::Uid,
                Stage::Rlimits,
                Stage::NoNewPrivs,
                Stage::Seccomp,
                Stage::Chdir,
                Stage::JoinCgroup,
                Stage::Landlock,
            ];
            if code >= 100 {
                return Stage::Mount(code - 100).name();
            }
            ALL.iter()
                .find(|s| s.code() == code)
                .map_or("unknown step", |s| s.name())
        }

        pub fn name(self) -> &'static str {
            match self {
                Stage::CloseFds => "closing inherited file descriptors",
                Stage::EnterMountNs => "entering the slot's mount namespace",
                Stage::NewMountNs => "making the run's mount namespace",
                Stage::AttachWork => "attaching the work dir",
                Stage::Hostname => "setting the hostname",
                Stage::EnterNetNs => "entering the run's network namespace",
                Stage::StartProgram => "starting the program",
                Stage::Streams => "redirecting standard streams",
                Stage::Session => "starting a new session",
                Stage::Groups => "dropping supplementary groups",
                Stage::Gid => "setting the group id",
                Stage::Uid => "setting the user id",
                Stage::Rlimits => "setting resource limits",
                Stage::NoNewPrivs => "setting no_new_privs",
                Stage::Seccomp => "installing the seccomp filter",
                Stage::Chdir => "entering the work dir",
                Stage::JoinCgroup => "joining the run's cgroup",
                Stage::Landlock => "entering the run's Landlock domain",
                Stage::Mount(_) => "mounting the sandbox filesystem",
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::Stage;

        #[test]
        fn every_stage_code_names_its_stage() {
            for s in [
                Stage::CloseFds,
                Stage::Uid,
                Stage::Seccomp,
                Stage::Chdir,
                Stage::JoinCgroup,
                Stage::Landlock,
                Stage::Mount(3),
            ] {
                assert_eq!(Stage::name_of(s.code()), s.name());
            }
            assert_eq!(Stage::name_of(2), "unknown step");
        }
    }
}

fn send(fd: i32, tag: u32, stage: u32, value: i32) {
    let mut rec = [0u8; 12];
    rec[0..4].copy_from_slice(&tag.to_ne_bytes());
    rec[4..8].copy_from_slice(&stage.to_ne_bytes());
    rec[8..12].copy_from_slice(&value.to_ne_bytes());
    let _ = sys::write(fd, &rec);
}

fn fail(plan: &ChildPlan, stage: report::Stage, errno: i32) -> ! {
    // Kept in the plan too: a step that fails for want of memory in the run's cgroup (the
    // program joined it) fails the report's write as well, whose pipe page is charged there.
    let failed = (u64::from(stage.code()) << 32) | u64::from(errno as u32);
    plan.setup_failed.store(failed, std::sync::atomic::Ordering::SeqCst);
    send(plan.report_fd, report::SETUP_FAILED, stage.code(), errno);
    sys::exit(126)
}

macro_rules! step {
    ($plan:expr, $stage:expr, $call:expr) => {
        if let Err(e) = $call {
            fail($plan, $stage, e);
        }
    };
}

/// Entry point of the sandbox's init: pid 1 of the run's pid namespace.
///
/// Sets up the filesystem, starts the program and waits for it; when the init
/// exits, the kernel kills every other process left in the namespace.
pub(crate) extern "C" fn init_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the plan, kept alive by the supervisor until we are reaped.
    let plan = unsafe { &*(arg as *const ChildPlan) };
    let rep = plan.report_fd;
    // Cloned by a slot's spawner, our parent is the executor thread that waits
    // for the spawner, and stays while a run of that spawner may last: die with
    // the executor. Otherwise a run outlives
    // a killed executor (its limits are the executor's to enforce) and a
    // session's init waits for its REPL forever. The kernel forces SIGKILL on
    // a namespace's init when it comes from an ancestor namespace. (Not when
    // cloned by a runtime thread, which may retire while the run lasts.)
    if plan.spawn_resp_fd >= 0 || plan.die_with_parent {
        let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as usize);
        // The executor died before that: nobody reads our reports.
        if sys::pipe_unread(rep) {
            sys::exit(0);
        }
    }
    // First of all: the executor waits for this answer before it can time the run.
    if plan.spawn_resp_fd >= 0 {
        let pid = plan.spawned_pid.load(std::sync::atomic::Ordering::SeqCst);
        let mut resp = [0u8; 8];
        resp[..4].copy_from_slice(&pid.to_ne_bytes());
        let _ = sys::write(plan.spawn_resp_fd, &resp);
    }
    sys::default_signals();

    // Other runs' pipes may have been inherited through the clone: drop them
    // so their readers see EOF as soon as their own programs end.
    let mut next = 0u32;
    for &fd in &plan.keep_fds {
        let fd = fd as u32;
        if fd > next {
            step!(plan, Stage::CloseFds, sys::close_range(next, fd - 1, 0));
        }
        next = fd + 1;
    }
    step!(plan, Stage::CloseFds, sys::close_range(next, u32::MAX, 0));
    let warm = plan.warm_ctl_fd >= 0;
    // Our namespaces are named through the executor's /proc, opened while it is ours (see
    // `zygote_init::send_namespaces`); -1 makes the warm start fail, and the run go cold.
    let ns_dir = match warm {
        true => {
            sys::open(c"/proc/self/ns", libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC).map_or(-1, |fd| fd as i32)
        }
        false => -1,
    };
    if warm && !plan.warm_own_mount_ns {
        super::zygote_init::send_namespaces(plan.warm_ctl_fd, ns_dir, plan.net_ns_fd, plan.mnt_ns_fd);
    }

    // The slot's namespace outlives runs: clear what a killed warm init left.
    step!(plan, Stage::EnterMountNs, sys::setns(plan.mnt_ns_fd, libc::CLONE_NEWNS));
    for p in &plan.run_mount_points {
        sys::detach_all(p);
    }
    // A cold run mounts in a copy of the slot's namespace (the template's
    // dozen mounts), which goes with the run's last process: its four mounts
    // are detached together, one RCU grace period instead of one per unmount
    // (each a millisecond or more on a busy node). A slot's warm runs mount in
    // the slot's namespace itself, where the zygote's child joins them; a
    // seat's, in a copy (seats share one namespace), which the child joins.
    let own_mount_ns = !warm || plan.warm_own_mount_ns;
    if own_mount_ns {
        step!(plan, Stage::NewMountNs, sys::unshare(libc::CLONE_NEWNS));
    }
    if warm && plan.warm_own_mount_ns {
        let mnt = sys::openat(ns_dir, c"mnt", libc::O_RDONLY | libc::O_CLOEXEC).map_or(-1, |fd| fd as i32);
        super::zygote_init::send_namespaces(plan.warm_ctl_fd, ns_dir, plan.net_ns_fd, mnt);
        if mnt >= 0 {
            let _ = sys::close(mnt);
        }
    }
    if ns_dir >= 0 {
        let _ = sys::close(ns_dir);
    }
    step!(plan, Stage::AttachWork, sys::move_mount_fd(plan.work_fd, c"/work"));
    for (i, m) in plan.mounts.iter().enumerate() {
        let r = sys::mount(
            m.src.as_deref(),
            &m.target,
            m.fstype.as_deref(),
            m.flags,
            m.data.as_deref(),
        );
        step!(plan, Stage::Mount(i as u32), r);
    }
    step!(plan, Stage::Hostname, sys::sethostname(plan.hostname));
    if plan.host_net {
        // No network namespace: the program's seccomp filter and Landlock domain.
    } else if plan.net_ns_fd >= 0 {
        // Made ahead of time, loopback already up (clone was not asked for one).
        step!(plan, Stage::EnterNetNs, sys::setns(plan.net_ns_fd, libc::CLONE_NEWNET));
    } else {
        step!(plan, Stage::EnterNetNs, sys::loopback_up());
    }
    if plan.warm_ctl_fd >= 0 {
        super::zygote_init::serve(rep, plan.warm_ctl_fd, plan.warm_ready_fd, &plan.run_mount_points);
    }

    // SAFETY: the program child runs on its own stack; CLONE_VFORK suspends us
    // until it has exec'd, so sharing memory with it is safe.
    let pid = unsafe {
        crate::sys::process::clone(
            prog_main,
            plan.prog_stack.top(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            arg,
            std::ptr::null_mut(),
        )
    };
    // libc's errno is the TLS of the thread our creator was cloned from, which
    // waits for it; nothing else writes it meanwhile. ENOMEM: the run's memory limit.
    let pid = match pid {
        Ok(pid) => pid,
        Err(e) => fail(plan, Stage::StartProgram, e.raw_os_error().unwrap_or(0)),
    };
    // The program, exec'd into memory of its own, is the OOM killer's first
    // choice, in its slot (the only choice there: see the spawner) and on the
    // node; what it forks inherits that.
    let _ = prefer_as_oom_victim(pid);
    let mut status = 0i32;
    loop {
        match sys::wait_any(&mut status) {
            Ok(p) if p as i32 == pid => {
                send(rep, report::STATUS, 0, status);
                // The run's own namespace, and its mounts, go when the run's
                // last process exits: before the supervisor sees the init's end.
                if !own_mount_ns {
                    for p in plan.run_mount_points.iter().rev() {
                        sys::detach_all(p);
                    }
                }
                sys::exit(0);
            }
            Ok(_) | Err(libc::EINTR) => continue,
            Err(_) => sys::exit(0),
        }
    }
}

/// Writes 1000 to `/proc/<pid>/oom_score_adj` (the run's own /proc), without allocating.
fn prefer_as_oom_victim(pid: i32) -> sys::Res {
    let mut path = [0u8; 48];
    let mut n = 0;
    for b in b"/proc/" {
        path[n] = *b;
        n += 1;
    }
    let mut digits = [0u8; 10];
    let (mut d, mut v) = (0, pid as u32);
    loop {
        digits[d] = b'0' + (v % 10) as u8;
        d += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    while d > 0 {
        d -= 1;
        path[n] = digits[d];
        n += 1;
    }
    for b in b"/oom_score_adj" {
        path[n] = *b;
        n += 1;
    }
    let path = std::ffi::CStr::from_bytes_until_nul(&path).map_err(|_| libc::EINVAL)?;
    let fd = sys::open(path, libc::O_WRONLY | libc::O_CLOEXEC)? as i32;
    let r = sys::write(fd, b"1000");
    let _ = sys::close(fd);
    r
}

/// Entry point of the program child: drops every privilege, then execs.
extern "C" fn prog_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: as in init_main.
    let plan = unsafe { &*(arg as *const ChildPlan) };
    let rep = plan.report_fd;
    // A seat's init stays in the executor's cgroup (it shares the executor's memory, and
    // no spawner waits for it: see `spawner`); the program, still sharing that memory
    // inside vfork, which the OOM killer never picks, moves itself into the seat's
    // cgroup, then hides the host's cgroup paths behind a namespace rooted there.
    if !plan.join_cgroup_fds.is_empty() {
        for &fd in &plan.join_cgroup_fds {
            step!(plan, Stage::JoinCgroup, sys::write(fd, b"0"));
        }
        step!(plan, Stage::JoinCgroup, sys::unshare(libc::CLONE_NEWCGROUP));
    }
    step!(plan, Stage::Streams, sys::dup_to(plan.stdin_fd, 0));
    step!(plan, Stage::Streams, sys::dup_to(plan.stdout_fd, 1));
    step!(plan, Stage::Streams, sys::dup_to(plan.stderr_fd, 2));
    step!(plan, Stage::Session, sys::setsid());
    step!(plan, Stage::Groups, sys::clear_groups());
    step!(plan, Stage::Gid, sys::setresgid(plan.gid));
    step!(plan, Stage::Uid, sys::setresuid(plan.uid));
    for (res, lim) in &plan.rlimits {
        step!(plan, Stage::Rlimits, sys::setrlimit(*res, lim));
    }
    step!(plan, Stage::NoNewPrivs, sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1));
    if plan.landlock_fd >= 0 {
        // A domain of the program's own (its init stays outside it): its abstract unix
        // sockets and signals reach only what this run made.
        step!(plan, Stage::Landlock, sys::landlock_restrict_self(plan.landlock_fd));
    }
    step!(plan, Stage::Seccomp, sys::install_filters(&plan.seccomp));
    step!(plan, Stage::Chdir, sys::chdir(&plan.cwd));
    // ETXTBSY: a file written just before (a compiled program) is still open for writing
    // somewhere for a moment, e.g. in a copy of a descriptor table a concurrent clone made
    // before closing it; tried again for up to 100 ms (as Go's os/exec tests do, golang/go#22315).
    let mut err = 0;
    for _ in 0..100 {
        // SAFETY: the pointer arrays are null-terminated and point into the
        // plan's CStrings, which outlive the call.
        err = match unsafe { sys::execve(&plan.exe, plan.argv_ptrs.as_ptr(), plan.envp_ptrs.as_ptr()) } {
            Err(e) => e,
            Ok(_) => 0,
        };
        if err != libc::ETXTBSY {
            break;
        }
        sys::sleep_ms(1);
    }
    send(rep, report::EXEC_FAILED, 0, err);
    sys::exit(127)
}

/// Parses the init's report records.
pub(crate) fn parse_reports(buf: &[u8]) -> Vec<(u32, u32, i32)> {
    buf.chunks_exact(12)
        .map(|c| {
            let w = |i: usize| [c[i], c[i + 1], c[i + 2], c[i + 3]];
            (
                u32::from_ne_bytes(w(0)),
                u32::from_ne_bytes(w(4)),
                i32::from_ne_bytes(w(8)),
            )
        })
        .collect()
}

/// Builds a NUL-terminated pointer array over `strings`.
pub(crate) fn ptr_array(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// Shorthand for the optional C strings of a mount step.
pub(crate) fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}
