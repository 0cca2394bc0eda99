//! Start-up probe: which isolation features this kernel and these privileges allow.

use crate::sys::{process, raw, stack::Stack};
use std::fmt;

/// One kernel feature the sandbox may use.
#[derive(Debug, Clone)]
pub struct Feature {
    pub name: &'static str,
    pub available: bool,
    pub in_use: bool,
    pub detail: String,
}

/// What mode `namespaces` cannot start without.
pub(crate) const NAMESPACES_NEEDS: [&str; 6] = [
    "pid_namespace",
    "mount_namespace",
    "net_namespace",
    "ipc_namespace",
    "uts_namespace",
    "seccomp",
];

/// Every probed feature.
#[derive(Debug, Clone)]
pub struct Features(pub Vec<Feature>);

impl Features {
    fn get(&self, name: &str) -> Option<&Feature> {
        self.0.iter().find(|f| f.name == name)
    }

    /// Marks a feature as used by the mode in force.
    pub(crate) fn set_in_use(&mut self, name: &str, in_use: bool) {
        if let Some(f) = self.0.iter_mut().find(|f| f.name == name) {
            f.in_use = in_use && f.available;
        }
    }

    /// What `namespaces` mode needs but cannot have, if anything.
    pub(crate) fn missing_for_namespaces(&self) -> Option<String> {
        let missing: Vec<String> = NAMESPACES_NEEDS
            .iter()
            .filter_map(|n| self.get(n))
            .filter(|f| !f.available)
            .map(|f| format!("{} ({})", f.name, f.detail))
            .collect();
        if missing.is_empty() {
            None
        } else {
            Some(format!(
                "missing {}; run as root or with CAP_SYS_ADMIN and an unconfined seccomp profile, or use --isolation restricted",
                missing.join(", ")
            ))
        }
    }
}

impl fmt::Display for Features {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|x| {
                format!(
                    "{}={}",
                    x.name,
                    if x.in_use {
                        "in-use"
                    } else if x.available {
                        "available"
                    } else {
                        "unavailable"
                    }
                )
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

extern "C" fn exit_now(_: *mut libc::c_void) -> libc::c_int {
    raw::exit(0)
}

/// Tries to create a namespace of one kind; returns the error if it fails.
fn try_namespace(flag: libc::c_int) -> Result<(), std::io::Error> {
    let stack = Stack::new(64 * 1024)?;
    // SAFETY: the child only calls the raw exit system call on its own stack.
    let pid = unsafe {
        process::clone(
            exit_now,
            stack.top(),
            flag | libc::CLONE_VM | libc::SIGCHLD,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    }?;
    let _ = process::waitpid(pid);
    Ok(())
}

fn feature(name: &'static str, r: Result<String, String>) -> Feature {
    match r {
        Ok(detail) => Feature {
            name,
            available: true,
            in_use: false,
            detail,
        },
        Err(detail) => Feature {
            name,
            available: false,
            in_use: false,
            detail,
        },
    }
}

/// Probes the kernel. Cheap: a few clones and file reads.
pub(crate) fn probe() -> Features {
    let ns = |flag| {
        try_namespace(flag)
            .map(|_| "can create".to_owned())
            .map_err(|e| e.to_string())
    };
    let userns = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&n| n > 0)
        .map(|n| format!("max_user_namespaces={n} (not used: the executor is already privileged)"))
        .ok_or_else(|| "disabled".to_owned());
    let v2 = std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let v1 = std::path::Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists();
    let landlock = process::landlock_abi().unwrap_or(0);
    Features(vec![
        feature("pid_namespace", ns(libc::CLONE_NEWPID)),
        feature("mount_namespace", ns(libc::CLONE_NEWNS)),
        feature("net_namespace", ns(libc::CLONE_NEWNET)),
        feature("ipc_namespace", ns(libc::CLONE_NEWIPC)),
        feature("uts_namespace", ns(libc::CLONE_NEWUTS)),
        feature("user_namespace", userns),
        feature(
            "cgroup_v2",
            if v2 {
                Ok("unified hierarchy".into())
            } else {
                Err("not mounted with controllers".into())
            },
        ),
        feature(
            "cgroup_v1",
            if v1 {
                Ok("memory, pids, cpuacct hierarchies".into())
            } else {
                Err("not mounted".into())
            },
        ),
        feature(
            "seccomp",
            if super::seccomp::available() {
                Ok("filter mode".into())
            } else {
                Err("kernel without seccomp".into())
            },
        ),
        feature("no_new_privs", Ok("prctl".into())),
        feature(
            "landlock",
            if landlock > 0 {
                Ok(format!("ABI {landlock}"))
            } else {
                Err("not enabled".into())
            },
        ),
    ])
}
