//! Sandpool's sandbox: isolation and limits for one run of untrusted code.
//!
//! This is the only crate of the workspace with `unsafe` code: the system
//! calls that set up namespaces, mounts, seccomp and cgroups, all made
//! through `sys`. Everything else reaches it through [`Runner`], opened
//! once with [`open`].
//!
//! Shared by both modes (read these first):
//! - `runner`: the [`Runner`] trait the executor's engine and judge hold;
//!   `run`: what one run is ([`RunSpec`]) and what came of it ([`RunOutcome`]);
//!   `limits`: what a run is held to; `config`: the mode and its settings.
//! - `workdir`: each run's `/work` ([`WorkDir`]); `workroot`: the executor's
//!   work root, locked to one executor.
//! - `runio`: a run's stdin, output capture, executable lookup and kill handle.
//! - `probe`: what the kernel allows, reported as [`Features`]; `seccomp`:
//!   the filter every run gets.
//! - `sys`: every raw system call, each wrapper documented.
//! - `error`: [`SandboxError`] and the errors it wraps.
//! - `zygote`: warm starts' Python zygotes (a pre-initialised interpreter per slot that forks
//!   one child per run), which both modes fork runs from.
//!
//! The modes, each in its own folder:
//! - `namespaces`: fresh namespaces, a slot cgroup and a uid per run, warm
//!   starts from per-slot zygotes (needs root or `CAP_SYS_ADMIN`).
//! - `restricted`: unprivileged pods (Landlock, seccomp, rlimits, a process group per run),
//!   warm Python starts from per-slot zygotes where Landlock scopes signals (ABI 6).
//!
//! Beside them: [`host`], safe wrappers for other crates' own processes, and
//! (feature `testing`) `testing`'s scripted runner for other crates' unit tests.

mod config;
pub mod error;
pub mod host;
mod limits;
mod namespaces;
mod probe;
mod restricted;
mod run;
mod runio;
mod runner;
mod seccomp;
mod sys;
#[cfg(feature = "testing")]
pub mod testing;
mod workdir;
mod workroot;
mod zygote;

pub use config::{
    DEFAULT_RO_PATHS, IsolationMode, NetworkIsolation, SHARED_PATH, SandboxConfig, SeatMemory, cgroup_name,
};
pub use error::SandboxError;
pub use limits::Limits;
pub use probe::{Feature, Features};
pub use run::{PATH, RunOutcome, RunSpec, SEAT_HOME, Termination, WORK_DIR, ZygoteConfig};

/// The Landlock ABI from which `restricted` mode starts Python runs warm: 6, the first
/// that scopes signals to a run's own domain, so that no run can signal the slot's
/// zygote or another run's processes (they share the executor's uid).
pub const RESTRICTED_WARM_LANDLOCK_ABI: i32 = 6;
pub use runner::{BoxFuture, Runner, SeatShare};
pub use workdir::{FetchError, OpenFile, WorkDir, WorkDirError, validate_rel_path};

/// Starts the runner of `cfg.mode`, or says why this machine cannot have it.
pub fn open(cfg: SandboxConfig) -> Result<Box<dyn Runner>, SandboxError> {
    match cfg.mode {
        IsolationMode::Namespaces => Ok(Box::new(namespaces::Namespaces::new(cfg)?)),
        IsolationMode::Restricted => Ok(Box::new(restricted::Restricted::new(cfg)?)),
    }
}
