//! Session totals: executor defaults, ceilings, and what one session gets.

use crate::error::ExecError;
use crate::limits::{LimitPolicy, Limits};
use sandpool_proto::v1 as pb;
use std::time::Duration;

/// Session settings, from the executor's flags.
#[derive(Debug, Clone, Copy)]
pub struct SessionPolicy {
    /// Sessions alive at once (each has a seat of its own: a uid and a cgroup, not a run slot).
    pub max_sessions: usize,
    /// Python interpreters kept started ahead of demand, each in a seat beyond the sessions'
    /// (`--session-spares`, see spares.rs).
    pub spares: usize,
    /// What an open session counts at, at least, against [`Self::memory_budget`].
    pub idle_bytes: u64,
    /// Memory all sessions may hold together, measured from their cgroups (each at least
    /// [`Self::idle_bytes`]); a create past it is refused.
    pub memory_budget: u64,
    pub lifetime: Duration,
    pub max_lifetime: Duration,
    pub idle: Duration,
    pub max_idle: Duration,
    /// Idle sessions are paused after this (`--session-pause-after-idle-ms`); None: never.
    pub pause_after_idle: Option<Duration>,
    /// On SIGTERM, pause every live session into the store before exiting
    /// (`--session-pause-on-drain`; docs/sessions.md, "Surviving the pod").
    pub pause_on_drain: bool,
    /// How often this executor sweeps the session store for what its TTL has passed and for
    /// orphans (`--session-store-sweep-secs`); None: never (another executor sweeps).
    pub store_sweep: Option<Duration>,
    pub calls: u32,
    pub max_calls: u32,
    pub cpu: Duration,
    pub max_cpu: Duration,
    /// uid of slot 0 (identity i runs as `uid_base + i`): how a session's processes are found from the host.
    pub uid_base: u32,
}

/// Sessions per executor unless `--max-sessions` says otherwise.
pub const DEFAULT_MAX_SESSIONS: usize = 64;

/// What an idle session is counted at unless `--session-idle-bytes` says otherwise: a Python
/// session's interpreter and driver measure about 12 MiB of PSS (docs/sessions.md), and a
/// session holds its /work's reserve (1 MiB) and pipes besides.
pub const DEFAULT_IDLE_BYTES: u64 = 32 << 20;

impl SessionPolicy {
    /// The defaults, for an executor whose slots start at `uid_base`.
    pub fn defaults(uid_base: u32) -> Self {
        SessionPolicy {
            max_sessions: DEFAULT_MAX_SESSIONS,
            spares: 0,
            idle_bytes: DEFAULT_IDLE_BYTES,
            memory_budget: DEFAULT_MAX_SESSIONS as u64 * DEFAULT_IDLE_BYTES,
            lifetime: Duration::from_secs(30 * 60),
            max_lifetime: Duration::from_secs(4 * 3600),
            idle: Duration::from_secs(5 * 60),
            max_idle: Duration::from_secs(3600),
            pause_after_idle: None,
            pause_on_drain: true,
            store_sweep: Some(Duration::from_secs(600)),
            calls: 1000,
            max_calls: 100_000,
            cpu: Duration::from_secs(10 * 60),
            max_cpu: Duration::from_secs(3600),
            uid_base,
        }
    }
}

/// What one session may use in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub lifetime: Duration,
    pub idle: Duration,
    pub calls: u32,
    pub memory: u64,
    pub cpu: Duration,
    pub disk: u64,
}

impl Totals {
    /// The proto form.
    pub fn to_proto(self) -> pb::SessionLimits {
        pb::SessionLimits {
            lifetime_ms: self.lifetime.as_millis() as u64,
            idle_timeout_ms: self.idle.as_millis() as u64,
            max_calls: self.calls,
            memory_bytes: self.memory,
            cpu_time_ms: self.cpu.as_millis() as u64,
            disk_bytes: self.disk,
        }
    }
}

/// A zero takes `default`; above `max` is an error naming `field`; below `min` too.
fn pick(field: &str, v: u64, default: u64, min: u64, max: u64) -> Result<u64, ExecError> {
    match v {
        0 => Ok(default.min(max)),
        v if v > max => Err(ExecError::invalid(
            field,
            format!("{v} is above this executor's ceiling of {max}"),
        )),
        v if v < min => Err(ExecError::invalid(
            field,
            format!("{v} is below the smallest allowed, {min} (0 takes the default)"),
        )),
        v => Ok(v),
    }
}

/// Resolves a create request's totals. `disk` is the executor's work dir size.
pub fn resolve(
    p: &SessionPolicy,
    limits: &LimitPolicy,
    req: Option<&pb::SessionLimits>,
    disk: u64,
) -> Result<Totals, ExecError> {
    let r = req.cloned().unwrap_or_default();
    let ms = |d: Duration| d.as_millis() as u64;
    let f = |n: &str| format!("session_limits.{n}");
    let lifetime = pick(
        &f("lifetime_ms"),
        r.lifetime_ms,
        ms(p.lifetime),
        1000,
        ms(p.max_lifetime),
    )?;
    let idle = pick(
        &f("idle_timeout_ms"),
        r.idle_timeout_ms,
        ms(p.idle),
        1000,
        ms(p.max_idle),
    )?;
    Ok(Totals {
        lifetime: Duration::from_millis(lifetime),
        // An idle timeout longer than the whole life means nothing more.
        idle: Duration::from_millis(idle.min(lifetime)),
        calls: pick(
            &f("max_calls"),
            r.max_calls as u64,
            p.calls as u64,
            1,
            p.max_calls as u64,
        )? as u32,
        memory: pick(
            &f("memory_bytes"),
            r.memory_bytes,
            limits.run_defaults.memory,
            crate::limits::MIN.memory,
            limits.max.memory,
        )?,
        cpu: Duration::from_millis(pick(
            &f("cpu_time_ms"),
            r.cpu_time_ms,
            ms(p.cpu),
            ms(crate::limits::MIN.cpu),
            ms(p.max_cpu),
        )?),
        disk,
    })
}

/// A call's limits: the request's (zero fields take the session's call limits), never more
/// than the session has left.
pub fn call_limits(
    policy: &LimitPolicy,
    session_calls: &Limits,
    req: Option<&pb::Limits>,
    totals: &Totals,
    cpu_left: Duration,
    life_left: Duration,
) -> Result<Limits, ExecError> {
    let mut l = policy.resolve(req, session_calls, "limits")?;
    l.memory = l.memory.min(totals.memory);
    l.cpu = l.cpu.min(cpu_left);
    l.wall = l.wall.min(life_left);
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> LimitPolicy {
        let l = Limits {
            wall: Duration::from_secs(10),
            cpu: Duration::from_secs(10),
            memory: 512 << 20,
            output: 1 << 20,
            processes: 64,
            file_size: 1 << 20,
        };
        LimitPolicy {
            run_defaults: l,
            compile_defaults: l,
            max: Limits { memory: 1 << 30, ..l },
        }
    }

    #[test]
    fn zero_takes_defaults_and_ceilings_name_the_field() {
        let p = SessionPolicy::defaults(1000);
        assert_eq!(p.max_sessions, DEFAULT_MAX_SESSIONS);
        let t = resolve(&p, &limits(), None, 1 << 20).unwrap();
        assert_eq!(t.lifetime, p.lifetime);
        assert_eq!(t.memory, 512 << 20);
        assert_eq!(t.disk, 1 << 20);
        let too_long = pb::SessionLimits {
            lifetime_ms: p.max_lifetime.as_millis() as u64 + 1,
            ..Default::default()
        };
        let e = resolve(&p, &limits(), Some(&too_long), 0).unwrap_err();
        assert!(e.to_string().contains("session_limits.lifetime_ms"), "{e}");
        let big_mem = pb::SessionLimits {
            memory_bytes: 2 << 30,
            ..Default::default()
        };
        let e = resolve(&p, &limits(), Some(&big_mem), 0).unwrap_err();
        assert!(e.to_string().contains("session_limits.memory_bytes"), "{e}");
        let short = pb::SessionLimits {
            lifetime_ms: 5000,
            idle_timeout_ms: 60_000,
            ..Default::default()
        };
        let t = resolve(&p, &limits(), Some(&short), 0).unwrap();
        assert_eq!(t.idle, Duration::from_secs(5), "idle never outlasts the life");
    }

    #[test]
    fn a_call_never_gets_more_than_the_session_has_left() {
        let lp = limits();
        let p = SessionPolicy::defaults(1000);
        let t = Totals {
            memory: 100 << 20,
            ..resolve(&p, &lp, None, 0).unwrap()
        };
        let l = call_limits(
            &lp,
            &lp.run_defaults,
            None,
            &t,
            Duration::from_secs(2),
            Duration::from_secs(3),
        )
        .unwrap();
        assert_eq!(l.memory, 100 << 20);
        assert_eq!(l.cpu, Duration::from_secs(2));
        assert_eq!(l.wall, Duration::from_secs(3));
    }
}
