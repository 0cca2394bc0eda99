//! Test helper: runs a command under a seccomp filter standing in for a
//! container runtime's default profile (`RuntimeDefault`), the way a
//! Kubernetes pod without privileges is started. End-to-end tests start the
//! executor in `restricted` mode through it and `setpriv` (non-root uid, no
//! capabilities, `no_new_privs`):
//!
//! `sandpool-pod-seccomp setpriv --reuid=N ... -- sandpool-executor ...`
//!
//! How close it is: the filter is the namespaces mode's run filter, which
//! refuses what the runtimes' defaults refuse to a process without
//! `CAP_SYS_ADMIN` and that matters here (namespaces through `unshare`,
//! `setns` and `clone` flags, `clone3`, mounts, `bpf`, `perf_event_open`, the
//! keyring, modules, kexec, `userfaultfd`, foreign ABIs), and more (ptrace,
//! `io_uring`); it leaves `seccomp`, `landlock_*`, `prctl` and `pidfd_*`
//! allowed, as containerd's and Docker's current defaults do.
//!
//! With `SANDPOOL_POD_SECCOMP_NO_LANDLOCK=1` the `landlock_*` calls fail with
//! ENOSYS, as under runtime profiles older than Landlock (Docker before 23):
//! what the executor must refuse to start under in restricted mode.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(program) = args.first() else {
        eprintln!("usage: sandpool-pod-seccomp PROGRAM [ARGS...]");
        return std::process::ExitCode::from(2);
    };
    let mut extra = vec![];
    if std::env::var_os("SANDPOOL_POD_SECCOMP_NO_LANDLOCK").is_some() {
        match no_landlock() {
            Ok(f) => extra.push(f),
            Err(e) => {
                eprintln!("sandpool-pod-seccomp: {e}");
                return std::process::ExitCode::from(1);
            }
        }
    }
    if let Err(e) = sandpool_sandbox::host::install_run_filters(&extra) {
        eprintln!("sandpool-pod-seccomp: installing the filter: {e}");
        return std::process::ExitCode::from(1);
    }
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(program).args(&args[1..]).exec();
    eprintln!("sandpool-pod-seccomp: exec {program}: {e}");
    std::process::ExitCode::from(127)
}

/// ENOSYS for every Landlock call.
fn no_landlock() -> Result<seccompiler::BpfProgram, seccompiler::BackendError> {
    let rules = [
        libc::SYS_landlock_create_ruleset,
        libc::SYS_landlock_add_rule,
        libc::SYS_landlock_restrict_self,
    ]
    .into_iter()
    .map(|nr| (nr, vec![]))
    .collect();
    #[cfg(target_arch = "x86_64")]
    let arch = seccompiler::TargetArch::x86_64;
    #[cfg(target_arch = "aarch64")]
    let arch = seccompiler::TargetArch::aarch64;
    seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )?
    .try_into()
}
