//! How a run is kept off the network (`--network-isolation`).
//!
//! `namespace`: a fresh network namespace per run, with only loopback ([`super::netns`]).
//! Making and tearing one down (the kernel registers every protocol in it) is about a
//! quarter of the executor's CPU per trivial run (docs/performance.md).
//!
//! `seccomp`: no network namespace. The run's seccomp filter refuses `socket(2)` and
//! `socketpair(2)` for every family but `AF_UNIX` (and io_uring, in both variants), so
//! nothing reaches the host's network stack; what is left is unix sockets:
//! - abstract ones live in the network namespace, the host's here: Landlock's
//!   `LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET` (ABI 6+) keeps each run to those its own domain
//!   made; every run enforces the ruleset itself, so each gets a domain of its own;
//! - pathname ones are reached through the filesystem, which is the run's own mount
//!   namespace in both variants (the read-only template, its own `/work`, `/tmp`, `/dev/shm`);
//! - `LANDLOCK_SCOPE_SIGNAL` keeps signals inside the run too (the pid namespace already does).
//!
//! `auto` takes `seccomp` where Landlock has ABI 6 or later, else `namespace`.

use crate::NetworkIsolation;
use landlock::{ABI, Access, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope};
use std::os::fd::OwnedFd;

/// The first Landlock ABI that scopes abstract unix sockets and signals.
pub(crate) const SCOPE_ABI: i32 = 6;

/// What the executor's runs get: `Namespace` or `Seccomp`, never `Auto`.
pub(crate) fn choose(want: NetworkIsolation, landlock_abi: i32) -> Result<NetworkIsolation, String> {
    match want {
        NetworkIsolation::Auto if landlock_abi >= SCOPE_ABI => Ok(NetworkIsolation::Seccomp),
        NetworkIsolation::Auto => Ok(NetworkIsolation::Namespace),
        NetworkIsolation::Seccomp if landlock_abi < SCOPE_ABI => Err(format!(
            "--network-isolation seccomp needs Landlock ABI {SCOPE_ABI} or later (abstract unix socket \
             scoping); this kernel has {landlock_abi}: use namespace or auto"
        )),
        other => Ok(other),
    }
}

/// A Landlock ruleset that handles no access right and scopes abstract unix sockets and
/// signals: enforced by each run on itself (`landlock_restrict_self`), it makes a new
/// domain per run. Made once; the descriptor is close-on-exec.
pub(crate) fn scope_ruleset() -> Result<OwnedFd, String> {
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(Scope::from_all(ABI::V6))
        .and_then(|r| r.create())
        .map_err(|e| format!("building the Landlock scope ruleset: {e}"))?;
    Option::<OwnedFd>::from(created).ok_or_else(|| "the kernel does not enforce Landlock scopes".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_seccomp_only_where_landlock_scopes_and_seccomp_refuses_older_kernels() {
        use NetworkIsolation::*;
        assert_eq!(choose(Auto, 7), Ok(Seccomp));
        assert_eq!(choose(Auto, 6), Ok(Seccomp));
        assert_eq!(choose(Auto, 5), Ok(Namespace));
        assert_eq!(choose(Auto, 0), Ok(Namespace));
        assert_eq!(choose(Namespace, 7), Ok(Namespace));
        assert_eq!(choose(Seccomp, 6), Ok(Seccomp));
        let e = choose(Seccomp, 5).unwrap_err();
        assert!(e.contains("ABI 6") && e.contains("has 5"), "{e}");
    }
}
