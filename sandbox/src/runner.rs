//! The one interface the executor runs programs through.
//!
//! The engine and the judge hold a `dyn Runner`: the isolation mode is chosen
//! once at start-up ([`crate::open`]), and tests of judging logic can put a
//! scripted runner in its place without root.

use crate::{Features, IsolationMode, RunOutcome, RunSpec, SandboxError, WorkDir, ZygoteConfig};
use std::future::Future;
use std::pin::Pin;

/// A boxed future borrowing the runner: what [`Runner::run`] returns (a trait
/// object cannot have `async fn`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs programs under limits, one at a time per slot.
///
/// Slots are numbered `0..slots()`; the caller (admission) guarantees a slot
/// runs one program at a time. Implementations: the `namespaces` and
/// `restricted` modes ([`crate::open`]), and `testing::FakeRunner` (feature
/// `testing`). `sandbox/tests/runner_contract.rs` holds each to this contract.
pub trait Runner: Send + Sync + std::fmt::Debug {
    /// The isolation mode in force.
    fn mode(&self) -> IsolationMode;

    /// What the kernel offers and which protections are in use.
    fn features(&self) -> &Features;

    /// How runs are kept off the network: `namespace` (a network namespace per run) or
    /// `seccomp` (no namespace: a socket filter and Landlock scoping; restricted mode's
    /// filter refuses even unix sockets). Never `auto`.
    fn network_isolation(&self) -> crate::NetworkIsolation {
        crate::NetworkIsolation::Seccomp
    }

    /// Number of run slots.
    fn slots(&self) -> usize;

    /// Number of session seats: identities numbered `slots()..slots() + seats()`, each with a
    /// uid and a cgroup of its own, that `work_dir` and `run` take like slots. A seat is for
    /// a long-lived session (an interpreter that sits idle between calls): it costs no run
    /// slot, so the caller bounds how many seats run at once. Seats never run on a GPU, and
    /// one run at a time each, like slots; their warm runs fork from one zygote for all seats. None outside namespaces mode.
    fn seats(&self) -> usize {
        0
    }

    /// Memory charged to identity `index`'s cgroup now (its processes, the files they wrote
    /// in tmpfs), bytes; None without cgroups, or before the identity's first run.
    fn memory_in_use(&self, index: usize) -> Option<u64> {
        let _ = index;
        None
    }

    /// Whether any process is left in session seat `index`'s cgroup: `Some(false)` once the
    /// seat is empty. Everything a seat's program starts stays in its cgroup (nothing in the
    /// sandbox may write another cgroup's files), so this is as strong as looking for the
    /// seat's uid in `/proc`, and costs one read instead of a read per process on the host.
    /// `Some(false)` for a seat that never ran anything; None where the sandbox cannot tell
    /// (no cgroups, a slot).
    fn seat_busy(&self, index: usize) -> Option<bool> {
        let _ = index;
        None
    }

    /// Sets session seat `index`'s CPU weight beside the slots and other seats, in cgroup v2
    /// `cpu.weight` units (1 to 10000; 100 is what every slot has; v1 writes `cpu.shares`
    /// scaled, 100 as 1024), for everything in the seat (its interpreter, the processes it
    /// left running), until set again; a seat whose cgroup is not made yet gets it when it
    /// is. False where the sandbox cannot weight CPU (no cgroups, v1 without the cpu
    /// controller, not a seat, a failed write). Blocks on cgroup files.
    fn set_seat_cpu_weight(&self, index: usize, weight: u32) -> bool {
        let _ = (index, weight);
        false
    }

    /// Moves session seat `index`'s share of the seats' memory ceiling
    /// ([`crate::SeatMemory`]); answers the seat's memory limit now. None where there is no
    /// ceiling (no cgroups, no seats, restricted mode).
    fn seat_share(&self, index: usize, share: SeatShare) -> Option<u64> {
        let _ = (index, share);
        None
    }

    /// True when GPU runs get device nodes.
    fn has_gpu(&self) -> bool;

    /// True when runs that ask for a warm start ([`RunSpec::warm`]) can get
    /// one; elsewhere they start cold, and capabilities must not say otherwise.
    fn warm_starts(&self) -> bool {
        false
    }

    /// Starts each slot's zygote for each of `zygotes` in the background, so
    /// that no slot's first warm run waits for one (a run that comes first
    /// waits for it as it would have anyway).
    fn start_zygotes(&self, zygotes: Vec<std::sync::Arc<ZygoteConfig>>) {
        let _ = zygotes;
    }

    /// Starts the zygote session seats' warm runs fork from (`cfg`), in the background; a
    /// seat's run that comes first waits for it.
    fn start_seat_zygote(&self, cfg: std::sync::Arc<ZygoteConfig>) {
        let _ = cfg;
    }

    /// Where the executor writes what runs see at [`crate::SHARED_PATH`] (a host path, or a
    /// `/proc/self/fd/N` path to a mount detached from the host); None: no shared dir.
    fn shared_dir(&self) -> Option<std::path::PathBuf> {
        None
    }

    /// True when runs see the shared dir ([`crate::SandboxConfig::shared_dir`]) and cannot
    /// change anything in it, its files' metadata included. Restricted mode under a non-root
    /// executor says false: runs share the executor's uid, so they own what it exported, and
    /// Landlock, which refuses them writes, does not govern `chmod` or `utimes`.
    fn shares_files_read_only(&self) -> bool {
        true
    }

    /// A fresh, empty work dir for a run in `slot`, owned by the slot's uid.
    fn work_dir(&self, slot: usize) -> Result<WorkDir, SandboxError>;

    /// Runs `spec` in `slot` with `work` as its `/work`.
    ///
    /// Every process the run started is dead when the future completes, and
    /// dropping the future kills the run.
    fn run<'a>(
        &'a self,
        slot: usize,
        work: &'a WorkDir,
        spec: &'a RunSpec,
    ) -> BoxFuture<'a, Result<RunOutcome, SandboxError>>;
}

/// How a session seat's share of the seats' memory ceiling moves ([`Runner::seat_share`]).
/// The shares never add up past the ceiling: a seat grows only into room the others leave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeatShare {
    /// A call of the session starts: its limit rises to this many bytes, or to all the room
    /// the other seats leave, whichever is less.
    Grow(u64),
    /// The call ended: the limit falls to what the seat holds, plus a little, and at least
    /// the floor (room allowed). Held memory stays; the session cannot grow until its next call.
    Hold,
    /// The call ended, but the session runs background processes (E2B's commands) that go
    /// on growing between calls: it keeps up to this many bytes, as [`SeatShare::Grow`], but
    /// only on loan: another seat's start or call that finds less room than it is owed (the
    /// floor, or what a call grows to) takes the loan back, down to what this seat holds (as
    /// [`SeatShare::Hold`]).
    Lend(u64),
    /// The session ended (its processes are gone, its `/work` dropped): no share.
    Release,
}
