//! The seccomp filters every sandboxed program runs under.
//!
//! A deny list, not an allow list: test programs in thirty languages use a
//! wide and changing set of system calls, while what they have no business
//! with is short and stable. Namespaces and uids do the containing; this
//! filter shrinks the kernel surface reachable from inside.

use seccompiler::{BpfProgram, sock_filter};

/// System calls that fail with EPERM inside the sandbox.
pub const DENIED: &[(&str, i64)] = &[
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("bpf", libc::SYS_bpf),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("syslog", libc::SYS_syslog),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("settimeofday", libc::SYS_settimeofday),
    ("clock_settime", libc::SYS_clock_settime),
    ("clock_adjtime", libc::SYS_clock_adjtime),
    ("adjtimex", libc::SYS_adjtimex),
    ("vhangup", libc::SYS_vhangup),
];

/// Namespace flags that `clone` may not be given inside the sandbox.
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWCGROUP as u64,
];

/// `AUDIT_ARCH_*` of the executor's own ABI: the only one programs may use.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// Bits of a system-call number that select another ABI on the same arch
/// (x86_64's x32 ABI sets bit 30). The deny list matches exact numbers, so a
/// call with these bits would slip past it on a kernel that has that ABI.
#[cfg(target_arch = "x86_64")]
const FOREIGN_NR_BITS: u32 = 0x4000_0000;
#[cfg(not(target_arch = "x86_64"))]
const FOREIGN_NR_BITS: u32 = 0;

/// The netlink family of host device events (uevents), broadcast to every
/// network namespace the host's user namespace owns: a run's own included.
const NETLINK_KOBJECT_UEVENT: u64 = 15;

const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;

const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

/// Offset of the low 32 bits of argument `i` in `struct seccomp_data` (both
/// supported architectures are little-endian).
const fn arg_lo(i: u32) -> u32 {
    16 + 8 * i
}

/// Every namespace flag fits the low word of clone's flags, the only one the filter reads.
const NAMESPACE_MASK: u32 = {
    let mut mask = 0u64;
    let mut i = 0;
    while i < NAMESPACE_FLAGS.len() {
        mask |= NAMESPACE_FLAGS[i];
        i += 1;
    }
    assert!(mask <= u32::MAX as u64);
    mask as u32
};

/// Errors building the filter (a bug, never the program's fault).
#[derive(Debug, thiserror::Error)]
#[error("building the seccomp filter: {0}")]
pub struct SeccompError(String);

/// Compiles the filters, in the order they must be installed.
///
/// One filter, searched as a binary tree on the system-call number. The
/// kernel runs every filter it installs once per system-call number, at
/// install time, to cache the calls it may always allow; a linear list of
/// fifty numbers, in three filters (seccompiler's shape, this module's
/// before), cost each run about 0.15 ms before `execve`. The tree needs a
/// handful of comparisons per number. The rules are those the tests check
/// against a reference built with seccompiler.
///
/// `unix_only`: the run has no network namespace of its own (`--network-isolation
/// seccomp`): `socket(2)` and `socketpair(2)` are refused for every family but
/// `AF_UNIX`, so nothing reaches the host's network stack (inet, inet6, packet, raw,
/// netlink, vsock, ...); io_uring, which could make sockets behind the filter's back, is
/// refused in both variants.
pub fn build_filters(unix_only: bool) -> Result<Vec<BpfProgram>, SeccompError> {
    let mut asm = Asm::default();
    let [kill, allow, eperm, enosys, ioctl, clone, socket] = [(); 7].map(|_| asm.label());
    let mut leaves: Vec<(u32, Label)> = DENIED.iter().map(|(_, nr)| (*nr as u32, eperm)).collect();
    // clone3 passes its flags in memory, where seccomp cannot look; ENOSYS
    // makes libc fall back to clone, whose flags are checked below.
    leaves.push((libc::SYS_clone3 as u32, enosys));
    leaves.push((libc::SYS_ioctl as u32, ioctl));
    leaves.push((libc::SYS_clone as u32, clone));
    leaves.push((libc::SYS_socket as u32, socket));
    if unix_only {
        // Its family is the same first argument: the same check as socket's.
        leaves.push((libc::SYS_socketpair as u32, socket));
    }
    leaves.sort_unstable_by_key(|(nr, _)| *nr);
    if leaves.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(SeccompError("a system call is listed twice".into()));
    }

    // Any call through another architecture's ABI (i386's `int 0x80` on
    // x86_64), or with the x32 bit set, kills the process: the numbers
    // below are this ABI's.
    asm.push(Ins::Ld(4)); // seccomp_data.arch
    asm.push(Ins::Jeq(AUDIT_ARCH, None, Some(kill)));
    asm.push(Ins::Ld(0)); // seccomp_data.nr
    if FOREIGN_NR_BITS != 0 {
        asm.push(Ins::Jset(FOREIGN_NR_BITS, Some(kill), None));
    }
    asm.tree(&leaves, allow);

    // TIOCSTI pushes bytes into a terminal's input: a classic sandbox escape.
    // The kernel reads the command as 32 bits, so the upper ones are ignored here too.
    asm.mark(ioctl);
    asm.push(Ins::Ld(arg_lo(1)));
    asm.push(Ins::Jeq(libc::TIOCSTI as u32, Some(eperm), Some(allow)));
    asm.mark(clone);
    asm.push(Ins::Ld(arg_lo(0)));
    asm.push(Ins::Jset(NAMESPACE_MASK, Some(eperm), Some(allow)));
    asm.mark(socket);
    asm.push(Ins::Ld(arg_lo(0)));
    if unix_only {
        // The kernel reads the family as 32 bits, so the upper ones are ignored here too.
        asm.push(Ins::Jeq(libc::AF_UNIX as u32, Some(allow), Some(eperm)));
    } else {
        asm.push(Ins::Jeq(libc::AF_NETLINK as u32, None, Some(allow)));
        asm.push(Ins::Ld(arg_lo(2)));
        asm.push(Ins::Jeq(NETLINK_KOBJECT_UEVENT as u32, Some(eperm), Some(allow)));
    }

    for (label, ret) in [
        (kill, SECCOMP_RET_KILL_PROCESS),
        (allow, SECCOMP_RET_ALLOW),
        (eperm, SECCOMP_RET_ERRNO | libc::EPERM as u32),
        (enosys, SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ] {
        asm.mark(label);
        asm.push(Ins::Ret(ret));
    }
    Ok(vec![asm.assemble()?])
}

/// A jump target, resolved by [`Asm::assemble`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Label(usize);

/// One cBPF instruction; a jump's `None` is the next instruction.
#[derive(Debug, Clone, Copy)]
enum Ins {
    /// A = the 32-bit word at offset k of `seccomp_data`.
    Ld(u32),
    Jeq(u32, Option<Label>, Option<Label>),
    Jge(u32, Option<Label>, Option<Label>),
    Jset(u32, Option<Label>, Option<Label>),
    Ret(u32),
}

/// A tiny assembler: instructions with forward jumps to labels.
#[derive(Debug, Default)]
struct Asm {
    code: Vec<Ins>,
    /// Where each label points, once marked.
    at: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> Label {
        self.at.push(None);
        Label(self.at.len() - 1)
    }

    fn mark(&mut self, l: Label) {
        self.at[l.0] = Some(self.code.len());
    }

    fn push(&mut self, i: Ins) {
        self.code.push(i);
    }

    /// Jumps to the leaf of the call number in A, or to `otherwise`: a binary
    /// search (jge) down to runs of at most three, compared one by one (jeq).
    fn tree(&mut self, leaves: &[(u32, Label)], otherwise: Label) {
        if leaves.len() <= 3 {
            for (i, (nr, leaf)) in leaves.iter().enumerate() {
                let miss = (i + 1 == leaves.len()).then_some(otherwise);
                self.push(Ins::Jeq(*nr, Some(*leaf), miss));
            }
            return;
        }
        let mid = leaves.len() / 2;
        let upper = self.label();
        self.push(Ins::Jge(leaves[mid].0, Some(upper), None));
        self.tree(&leaves[..mid], otherwise);
        self.mark(upper);
        self.tree(&leaves[mid..], otherwise);
    }

    fn assemble(&self) -> Result<BpfProgram, SeccompError> {
        const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
        const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
        const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
        const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
        const RET_K: u16 = 0x06; // BPF_RET | BPF_K
        let offset = |from: usize, to: Option<Label>| -> Result<u8, SeccompError> {
            let Some(l) = to else { return Ok(0) };
            let at = self.at[l.0].ok_or_else(|| SeccompError(format!("label {} never marked", l.0)))?;
            at.checked_sub(from + 1)
                .and_then(|d| u8::try_from(d).ok())
                .ok_or_else(|| SeccompError(format!("jump from {from} to {at} out of range")))
        };
        let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
        self.code
            .iter()
            .enumerate()
            .map(|(i, ins)| {
                Ok(match *ins {
                    Ins::Ld(k) => op(LD_W_ABS, 0, 0, k),
                    Ins::Jeq(k, t, f) => op(JEQ_K, offset(i, t)?, offset(i, f)?, k),
                    Ins::Jge(k, t, f) => op(JGE_K, offset(i, t)?, offset(i, f)?, k),
                    Ins::Jset(k, t, f) => op(JSET_K, offset(i, t)?, offset(i, f)?, k),
                    Ins::Ret(k) => op(RET_K, 0, 0, k),
                })
            })
            .collect()
    }
}

/// Converts seccompiler's program into the kernel's struct layout.
pub fn to_kernel(prog: &BpfProgram) -> Vec<libc::sock_filter> {
    prog.iter()
        .map(|f| libc::sock_filter {
            code: f.code,
            jt: f.jt,
            jf: f.jf,
            k: f.k,
        })
        .collect()
}

/// True when the kernel supports seccomp filters.
pub fn available() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
}
#[cfg(test)]
mod tests {
    //! Runs the compiled filters over synthetic `seccomp_data` with a small cBPF
    //! interpreter, so every entry of the deny list is checked, not only the
    //! calls an unprivileged program could not make anyway.
    use super::*;

    const ALLOW: u32 = 0x7fff_0000;
    const ERRNO: u32 = 0x0005_0000;
    const KILL: u32 = SECCOMP_RET_KILL_PROCESS;

    use cbpf::{data, run};

    /// What the kernel does with every filter installed: the most severe action wins.
    fn verdict(nr: i64, args: [u64; 6]) -> u32 {
        verdict_as(nr, AUDIT_ARCH, args)
    }

    fn verdict_as(nr: i64, arch: u32, args: [u64; 6]) -> u32 {
        verdict_of(false, nr, arch, args)
    }

    fn verdict_of(unix_only: bool, nr: i64, arch: u32, args: [u64; 6]) -> u32 {
        let d = data(nr, arch, args);
        let filters = build_filters(unix_only).unwrap();
        filters
            .iter()
            .map(|p| run(&to_kernel(p), &d))
            .min_by_key(|r| (r & 0xffff_0000) as i32)
            .unwrap()
    }

    /// The same rules as seccompiler builds them (three filters, linear
    /// lists): the reference the tree-shaped filter must agree with.
    fn reference_filters(unix_only: bool) -> Vec<Vec<libc::sock_filter>> {
        use seccompiler::{
            SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition as Cond, SeccompFilter,
            SeccompRule, TargetArch,
        };
        use std::collections::BTreeMap;
        #[cfg(target_arch = "x86_64")]
        const ARCH: TargetArch = TargetArch::x86_64;
        #[cfg(target_arch = "aarch64")]
        const ARCH: TargetArch = TargetArch::aarch64;
        const JEQ_K: u16 = 0x15;
        const JSET_K: u16 = 0x45;
        let op = |code, jt, jf, k| sock_filter { code, jt, jf, k };
        let abi_guard: BpfProgram = vec![
            op(0x20, 0, 0, 4),
            op(JEQ_K, 1, 0, AUDIT_ARCH),
            op(0x06, 0, 0, KILL),
            op(0x20, 0, 0, 0),
            op(JSET_K, 0, 1, FOREIGN_NR_BITS),
            op(0x06, 0, 0, KILL),
            op(0x06, 0, 0, ALLOW),
        ];
        let mut denied: BTreeMap<i64, Vec<SeccompRule>> = DENIED.iter().map(|(_, nr)| (*nr, vec![])).collect();
        denied.insert(
            libc::SYS_ioctl,
            vec![SeccompRule::new(vec![Cond::new(1, Len::Dword, Op::Eq, libc::TIOCSTI).unwrap()]).unwrap()],
        );
        let clone_rules = NAMESPACE_FLAGS
            .iter()
            .map(|&f| SeccompRule::new(vec![Cond::new(0, Len::Qword, Op::MaskedEq(f), f).unwrap()]).unwrap())
            .collect();
        denied.insert(libc::SYS_clone, clone_rules);
        let not_unix =
            || SeccompRule::new(vec![Cond::new(0, Len::Dword, Op::Ne, libc::AF_UNIX as u64).unwrap()]).unwrap();
        if unix_only {
            denied.insert(libc::SYS_socket, vec![not_unix()]);
            denied.insert(libc::SYS_socketpair, vec![not_unix()]);
        } else {
            denied.insert(
                libc::SYS_socket,
                vec![
                    SeccompRule::new(vec![
                        Cond::new(0, Len::Dword, Op::Eq, libc::AF_NETLINK as u64).unwrap(),
                        Cond::new(2, Len::Dword, Op::Eq, NETLINK_KOBJECT_UEVENT).unwrap(),
                    ])
                    .unwrap(),
                ],
            );
        }
        let eperm = SeccompAction::Errno(libc::EPERM as u32);
        let deny: BpfProgram = SeccompFilter::new(denied, SeccompAction::Allow, eperm, ARCH)
            .unwrap()
            .try_into()
            .unwrap();
        let clone3: BpfProgram = SeccompFilter::new(
            [(libc::SYS_clone3, vec![])].into_iter().collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            ARCH,
        )
        .unwrap()
        .try_into()
        .unwrap();
        [abi_guard, deny, clone3].iter().map(to_kernel).collect()
    }

    /// Every call number of every ABI, with arguments that hit each rule and
    /// around it, gets from the one tree-shaped filter what seccompiler's three gave.
    #[test]
    fn the_tree_filter_agrees_with_the_reference_on_every_call() {
        agrees_with_the_reference(false);
    }

    #[test]
    fn the_unix_only_tree_filter_agrees_with_the_reference_on_every_call() {
        agrees_with_the_reference(true);
    }

    fn agrees_with_the_reference(unix_only: bool) {
        let ours: Vec<_> = build_filters(unix_only).unwrap().iter().map(to_kernel).collect();
        assert_eq!(ours.len(), 1, "one filter to install");
        let reference = reference_filters(unix_only);
        let most_severe = |filters: &[Vec<libc::sock_filter>], d: &[u8]| {
            filters
                .iter()
                .map(|p| run(p, d))
                .min_by_key(|r| (r & 0xffff_0000) as i32)
                .unwrap()
        };
        let mut args: Vec<[u64; 6]> = vec![[0; 6], [u64::MAX; 6]];
        let tiocsti: u64 = libc::TIOCSTI;
        args.push([0, tiocsti, 0, 0, 0, 0]);
        args.push([0, tiocsti | (1 << 32), 0, 0, 0, 0]);
        args.push([0, tiocsti + 1, 0, 0, 0, 0]);
        for &f in NAMESPACE_FLAGS {
            args.push([f | libc::SIGCHLD as u64, 0, 0, 0, 0, 0]);
            args.push([!f, 0, 0, 0, 0, 0]);
        }
        let netlink = libc::AF_NETLINK as u64;
        for family in [
            netlink,
            netlink | (1 << 32),
            libc::AF_UNIX as u64,
            libc::AF_UNIX as u64 | (1 << 32),
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
            libc::AF_PACKET as u64,
            libc::AF_VSOCK as u64,
        ] {
            for proto in [0, NETLINK_KOBJECT_UEVENT, NETLINK_KOBJECT_UEVENT | (1 << 32), 16] {
                args.push([family, libc::SOCK_DGRAM as u64, proto, 0, 0, 0]);
            }
        }
        // And some arbitrary ones (a fixed LCG: the same every run).
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..32 {
            let mut a = [0u64; 6];
            for v in &mut a {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                *v = x;
            }
            args.push(a);
        }
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        let x32 = i64::from(FOREIGN_NR_BITS);
        for arch in [AUDIT_ARCH, AUDIT_ARCH_I386, AUDIT_ARCH ^ 0x8000_0000] {
            for nr in (0..1100)
                .chain((0..600).map(|n| n | x32))
                .chain([-1, i64::from(u32::MAX)])
            {
                for a in &args {
                    let d = data(nr, arch, *a);
                    assert_eq!(
                        most_severe(&ours, &d),
                        most_severe(&reference, &d),
                        "nr {nr} arch {arch:#x} args {a:x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn every_denied_call_gets_eperm_and_ordinary_calls_pass() {
        for (name, nr) in DENIED {
            assert_eq!(verdict(*nr, [0; 6]), ERRNO | libc::EPERM as u32, "{name}");
        }
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_openat,
            libc::SYS_execve,
            libc::SYS_mmap,
            libc::SYS_exit_group,
        ] {
            assert_eq!(verdict(nr, [0; 6]), ALLOW, "syscall {nr}");
        }
    }

    #[test]
    fn clone_is_refused_namespace_flags_and_clone3_gets_enosys() {
        let sigchld = libc::SIGCHLD as u64;
        for &flag in NAMESPACE_FLAGS {
            assert_eq!(
                verdict(libc::SYS_clone, [flag | sigchld, 0, 0, 0, 0, 0]),
                ERRNO | libc::EPERM as u32,
                "{flag:#x}"
            );
        }
        let thread =
            (libc::CLONE_VM | libc::CLONE_FS | libc::CLONE_FILES | libc::CLONE_SIGHAND | libc::CLONE_THREAD) as u64;
        assert_eq!(verdict(libc::SYS_clone, [thread, 0, 0, 0, 0, 0]), ALLOW);
        assert_eq!(verdict(libc::SYS_clone, [sigchld, 0, 0, 0, 0, 0]), ALLOW);
        assert_eq!(verdict(libc::SYS_clone3, [0; 6]), ERRNO | libc::ENOSYS as u32);
    }

    #[test]
    fn tiocsti_is_refused_whatever_the_upper_bits() {
        let tiocsti: u64 = libc::TIOCSTI;
        assert_eq!(
            verdict(libc::SYS_ioctl, [0, tiocsti, 0, 0, 0, 0]),
            ERRNO | libc::EPERM as u32
        );
        // The kernel reads the command as 32 bits: upper bits must not slip past the filter.
        assert_eq!(
            verdict(libc::SYS_ioctl, [0, tiocsti | (1 << 32), 0, 0, 0, 0]),
            ERRNO | libc::EPERM as u32
        );
        assert_eq!(verdict(libc::SYS_ioctl, [0, libc::TCGETS, 0, 0, 0, 0]), ALLOW);
    }

    #[test]
    fn another_architecture_kills_the_process() {
        const AUDIT_ARCH_I386: u32 = 0x4000_0003;
        const AUDIT_ARCH_ARM: u32 = 0x4000_0028;
        for arch in [AUDIT_ARCH_I386, AUDIT_ARCH_ARM, AUDIT_ARCH ^ 0x8000_0000] {
            for nr in [libc::SYS_read, libc::SYS_getpid, 20 /* i386 getpid */] {
                assert_eq!(verdict_as(nr, arch, [0; 6]), KILL, "arch {arch:#x} nr {nr}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn x32_system_calls_kill_the_process_even_the_allowed_ones() {
        const X32: i64 = 0x4000_0000;
        for nr in [
            libc::SYS_read,
            libc::SYS_getpid,
            libc::SYS_mount,
            libc::SYS_unshare,
            512,
            547,
        ] {
            assert_eq!(verdict(nr | X32, [0; 6]), KILL, "x32 nr {nr}");
        }
        assert_eq!(verdict(libc::SYS_getpid, [0; 6]), ALLOW);
    }

    #[test]
    fn uevent_sockets_are_refused_and_other_sockets_pass() {
        let netlink = libc::AF_NETLINK as u64;
        let dgram = libc::SOCK_DGRAM as u64;
        let uevent = [
            netlink,
            dgram | libc::SOCK_CLOEXEC as u64,
            NETLINK_KOBJECT_UEVENT,
            0,
            0,
            0,
        ];
        assert_eq!(verdict(libc::SYS_socket, uevent), ERRNO | libc::EPERM as u32);
        // The kernel reads the int arguments as 32 bits: upper bits change nothing.
        let high = [netlink | (1 << 32), dgram, NETLINK_KOBJECT_UEVENT | (1 << 32), 0, 0, 0];
        assert_eq!(verdict(libc::SYS_socket, high), ERRNO | libc::EPERM as u32);
        for args in [
            [netlink, dgram, 0 /* NETLINK_ROUTE */, 0, 0, 0],
            [libc::AF_INET as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
            [libc::AF_UNIX as u64, dgram, NETLINK_KOBJECT_UEVENT, 0, 0, 0],
        ] {
            assert_eq!(verdict(libc::SYS_socket, args), ALLOW, "{args:?}");
        }
    }
}

#[cfg(test)]
mod unix_only_tests {
    use super::*;
    use cbpf::{data, run};

    fn verdict(nr: i64, args: [u64; 6]) -> u32 {
        let d = data(nr, AUDIT_ARCH, args);
        run(&to_kernel(&build_filters(true).unwrap()[0]), &d)
    }

    /// Without a network namespace, every family the kernel has but `AF_UNIX` is refused,
    /// by `socket` and `socketpair` alike, whatever the type, protocol and upper bits.
    #[test]
    fn every_socket_family_but_unix_is_refused() {
        let eperm = SECCOMP_RET_ERRNO | libc::EPERM as u32;
        for family in (0..64u64).filter(|f| *f != libc::AF_UNIX as u64) {
            for nr in [libc::SYS_socket, libc::SYS_socketpair] {
                for (ty, proto) in [(libc::SOCK_STREAM, 0), (libc::SOCK_DGRAM, 0), (libc::SOCK_RAW, 255)] {
                    let args = [family, ty as u64, proto, 0, 0, 0];
                    assert_eq!(verdict(nr, args), eperm, "nr {nr} family {family}");
                    let high = [family | (1 << 32), ty as u64, proto, 0, 0, 0];
                    assert_eq!(verdict(nr, high), eperm, "nr {nr} family {family} (upper bits)");
                }
            }
        }
        for nr in [libc::SYS_socket, libc::SYS_socketpair] {
            let unix = [libc::AF_UNIX as u64, libc::SOCK_STREAM as u64, 0, 0, 0, 0];
            assert_eq!(verdict(nr, unix), SECCOMP_RET_ALLOW);
        }
        // The other ways to a socket stay refused.
        for nr in [
            libc::SYS_io_uring_setup,
            libc::SYS_bpf,
            libc::SYS_unshare,
            libc::SYS_setns,
        ] {
            assert_eq!(verdict(nr, [0; 6]), eperm, "nr {nr}");
        }
    }
}

/// A small cBPF interpreter over synthetic `seccomp_data`, for the tests of
/// this filter and of restricted mode's: every entry of a deny list is
/// checked, not only the calls an unprivileged test program could make.
#[cfg(test)]
pub(crate) mod cbpf {
    /// `struct seccomp_data` as the kernel lays it out (little-endian words).
    pub fn data(nr: i64, arch: u32, args: [u64; 6]) -> Vec<u8> {
        let mut d = Vec::with_capacity(64);
        d.extend_from_slice(&(nr as i32).to_le_bytes());
        d.extend_from_slice(&arch.to_le_bytes());
        d.extend_from_slice(&0u64.to_le_bytes());
        args.iter().for_each(|a| d.extend_from_slice(&a.to_le_bytes()));
        d
    }

    /// The cBPF subset seccompiler emits: ld [k], and #k, jeq/jset/jgt/jge #k, ja, ret #k.
    pub fn run(prog: &[libc::sock_filter], d: &[u8]) -> u32 {
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let f = &prog[pc];
            pc += 1;
            match f.code {
                0x20 => a = u32::from_le_bytes(d[f.k as usize..f.k as usize + 4].try_into().unwrap()),
                0x54 => a &= f.k,
                0x15 => pc += usize::from(if a == f.k { f.jt } else { f.jf }),
                0x45 => pc += usize::from(if a & f.k != 0 { f.jt } else { f.jf }),
                0x25 => pc += usize::from(if a > f.k { f.jt } else { f.jf }),
                0x35 => pc += usize::from(if a >= f.k { f.jt } else { f.jf }),
                0x05 => pc += f.k as usize,
                0x06 => return f.k,
                c => panic!("unexpected cBPF op {c:#x}"),
            }
        }
    }
}
