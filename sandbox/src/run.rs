//! One run as every [`crate::Runner`] sees it: what to execute
//! ([`RunSpec`]) and what came of it ([`RunOutcome`]).

use crate::Limits;
use std::time::Duration;

/// Directory (inside the sandbox) where runs start.
pub const WORK_DIR: &str = "/work";

/// Where a session seat's runs (namespaces mode) also see their `/work`: the same mount,
/// a second time, as E2B's sandboxes have their files in their user's home. Its owner is
/// named `user` there, with this home.
pub const SEAT_HOME: &str = "/home/user";

/// PATH inside the sandbox: where a bare program name is looked up, and runs' default PATH.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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
    /// Fork the program from the slot's zygote for this configuration (a
    /// warm start) when the slot can; `argv` must then be the zygote's
    /// interpreter and flags, the script, and its arguments.
    pub warm: Option<std::sync::Arc<ZygoteConfig>>,
}

/// Why the supervisor ended a run early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    WallTime,
    CpuTime,
    Output,
}

/// Everything observed about one run.
#[derive(Debug, Clone, Default)]
pub struct RunOutcome {
    /// Exit code when the program exited normally.
    pub exit_code: i32,
    /// Signal that killed the program, 0 if none.
    pub signal: i32,
    pub killed_by: Option<Termination>,
    pub oom_killed: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub wall: Duration,
    pub cpu: Duration,
    pub peak_memory: u64,
    /// True when CPU time reached the limit (the cgroup's count, the kill at
    /// the CPU limit, or SIGXCPU). Whether a wall-time kill counts as a time
    /// limit too is the verdict's rule, not the sandbox's.
    pub cpu_exceeded: bool,
    /// True when a slot's zygote forked the program (a warm start).
    pub warm: bool,
}

/// A language's warm start, from its table entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZygoteConfig {
    /// The language's name (for logs).
    pub name: String,
    /// The run command up to the script: interpreter and flags (`["python3", "-B"]`).
    pub interpreter: Vec<String>,
    /// The runs' environment (the zygote starts with the same).
    pub env: Vec<(String, String)>,
    /// Modules imported before the first fork.
    pub preload: Vec<String>,
    /// A `-c` program compiled before the first fork (a session's driver): a run of exactly
    /// this program (`INTERPRETER -c PROGRAM`) starts without compiling it.
    pub command: Option<String>,
}
