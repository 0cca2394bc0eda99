//! Turning what the sandbox observed into a verdict and a `PhaseResult`.

use sandpool_proto::v1::{PhaseResult, Verdict};
use sandpool_sandbox::{RunOutcome, Termination};

/// True when a run killed at its wall-time limit was busy on the CPU the
/// whole time (a loop, not a sleep or a wait for input): it exceeded its
/// time, not just its wall time. Half the wall time allows for CPU
/// contention on a busy node.
pub fn busy_until_killed(o: &RunOutcome) -> bool {
    o.killed_by == Some(Termination::WallTime) && !o.wall.is_zero() && o.cpu.as_secs_f64() >= 0.5 * o.wall.as_secs_f64()
}

/// The verdict of one phase, from its outcome.
pub fn phase_verdict(o: &RunOutcome) -> Verdict {
    match o.killed_by {
        Some(Termination::Output) => return Verdict::OutputLimitExceeded,
        Some(Termination::CpuTime) => return Verdict::TimeLimitExceeded,
        Some(Termination::WallTime) if o.cpu_exceeded || busy_until_killed(o) => return Verdict::TimeLimitExceeded,
        Some(Termination::WallTime) => return Verdict::WallTimeLimitExceeded,
        None => {}
    }
    if o.stdout_truncated || o.stderr_truncated {
        return Verdict::OutputLimitExceeded;
    }
    if o.oom_killed && (o.signal != 0 || o.exit_code != 0) {
        return Verdict::MemoryLimitExceeded;
    }
    if o.cpu_exceeded && o.signal != 0 {
        return Verdict::TimeLimitExceeded;
    }
    if o.signal != 0 || o.exit_code != 0 {
        return Verdict::RuntimeError;
    }
    Verdict::Ok
}

/// The proto form of a phase, with its verdict.
pub fn phase_result(o: RunOutcome) -> PhaseResult {
    let verdict = phase_verdict(&o);
    PhaseResult {
        verdict: verdict as i32,
        exit_code: o.exit_code,
        signal: o.signal,
        stdout: o.stdout,
        stderr: o.stderr,
        stdout_truncated: o.stdout_truncated,
        stderr_truncated: o.stderr_truncated,
        wall_time_us: o.wall.as_micros() as u64,
        cpu_time_us: o.cpu.as_micros() as u64,
        peak_memory_bytes: o.peak_memory,
    }
}

/// A phase the executor itself failed to run.
pub fn sandbox_error_phase() -> PhaseResult {
    PhaseResult {
        verdict: Verdict::SandboxError as i32,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wall_kill_is_a_time_limit_when_the_run_was_busy_on_the_cpu() {
        use std::time::Duration;
        let killed = |cpu_ms: u64, wall_ms: u64| RunOutcome {
            killed_by: Some(Termination::WallTime),
            signal: 9,
            cpu: Duration::from_millis(cpu_ms),
            wall: Duration::from_millis(wall_ms),
            ..Default::default()
        };
        // A loop on a machine shared with another: half the wall time on the CPU.
        assert_eq!(phase_verdict(&killed(1000, 2000)), Verdict::TimeLimitExceeded);
        assert_eq!(phase_verdict(&killed(1900, 2000)), Verdict::TimeLimitExceeded);
        // Sleeping or waiting for input: the wall clock ran out, not the CPU.
        assert_eq!(phase_verdict(&killed(10, 2000)), Verdict::WallTimeLimitExceeded);
        assert_eq!(phase_verdict(&killed(999, 2000)), Verdict::WallTimeLimitExceeded);
        // Busy but exited on its own: no limit was hit.
        let exited = RunOutcome {
            cpu: Duration::from_millis(1900),
            wall: Duration::from_millis(2000),
            ..Default::default()
        };
        assert_eq!(phase_verdict(&exited), Verdict::Ok);
    }

    #[test]
    fn verdicts_follow_the_outcome() {
        let ok = RunOutcome::default();
        assert_eq!(phase_verdict(&ok), Verdict::Ok);
        assert_eq!(
            phase_verdict(&RunOutcome {
                exit_code: 3,
                ..ok.clone()
            }),
            Verdict::RuntimeError
        );
        assert_eq!(
            phase_verdict(&RunOutcome {
                signal: 9,
                oom_killed: true,
                ..ok.clone()
            }),
            Verdict::MemoryLimitExceeded
        );
        assert_eq!(
            phase_verdict(&RunOutcome {
                killed_by: Some(Termination::WallTime),
                signal: 9,
                ..ok.clone()
            }),
            Verdict::WallTimeLimitExceeded
        );
        assert_eq!(
            phase_verdict(&RunOutcome {
                killed_by: Some(Termination::WallTime),
                cpu_exceeded: true,
                ..ok.clone()
            }),
            Verdict::TimeLimitExceeded
        );
        assert_eq!(
            phase_verdict(&RunOutcome {
                signal: libc::SIGXCPU,
                cpu_exceeded: true,
                ..ok.clone()
            }),
            Verdict::TimeLimitExceeded
        );
        assert_eq!(
            phase_verdict(&RunOutcome {
                stdout_truncated: true,
                ..ok
            }),
            Verdict::OutputLimitExceeded
        );
    }
}
