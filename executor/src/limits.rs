//! Resource limits: executor defaults, ceilings, and per-request resolution.

use sandpool_proto::v1 as pb;
use std::time::Duration;

pub use sandpool_sandbox::Limits;

/// The proto form of `l`, for capabilities.
pub fn to_proto(l: Limits) -> pb::Limits {
    pb::Limits {
        wall_time_ms: l.wall.as_millis() as u64,
        cpu_time_ms: l.cpu.as_millis() as u64,
        memory_bytes: l.memory,
        output_bytes: l.output,
        processes: l.processes,
        file_size_bytes: l.file_size,
    }
}

/// The smallest limits a request may ask for. Below them a run cannot even
/// start (a memory cgroup smaller than the sandbox's own set-up, a file-size
/// limit that kills the compiler's first write): that is the request's
/// mistake, and reporting it as SANDBOX_ERROR would make clients retry it.
pub const MIN: Limits = Limits {
    wall: Duration::from_millis(10),
    cpu: Duration::from_millis(10),
    memory: 16 << 20,
    output: 1024,
    processes: 1,
    file_size: 4096,
};

/// A requested limit outside what this executor allows.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    #[error("{field} = {value} is above this executor's ceiling of {max}")]
    AboveMax { field: String, value: u64, max: u64 },
    #[error("{field} = {value} is below the smallest this executor runs with, {min} (0 takes the default)")]
    BelowMin { field: String, value: u64, min: u64 },
}

impl LimitError {
    /// The request field at fault.
    pub fn field(&self) -> &str {
        match self {
            LimitError::AboveMax { field, .. } | LimitError::BelowMin { field, .. } => field,
        }
    }
}

/// Defaults and ceilings, from the executor's flags.
#[derive(Debug, Clone, Copy)]
pub struct LimitPolicy {
    pub run_defaults: Limits,
    pub compile_defaults: Limits,
    pub max: Limits,
}

impl LimitPolicy {
    /// Resolves a request's limits: zero fields take `defaults`; any field above the ceiling is an error naming it.
    pub fn resolve(&self, req: Option<&pb::Limits>, defaults: &Limits, field: &str) -> Result<Limits, LimitError> {
        let r = req.cloned().unwrap_or_default();
        let pick = |name: &str, v: u64, d: u64, min: u64, max: u64| -> Result<u64, LimitError> {
            if v == 0 {
                return Ok(d.min(max));
            }
            if v > max {
                return Err(LimitError::AboveMax {
                    field: format!("{field}.{name}"),
                    value: v,
                    max,
                });
            }
            if v < min {
                return Err(LimitError::BelowMin {
                    field: format!("{field}.{name}"),
                    value: v,
                    min,
                });
            }
            Ok(v)
        };
        let ms = |d: Duration| d.as_millis() as u64;
        Ok(Limits {
            wall: Duration::from_millis(pick(
                "wall_time_ms",
                r.wall_time_ms,
                ms(defaults.wall),
                ms(MIN.wall),
                ms(self.max.wall),
            )?),
            cpu: Duration::from_millis(pick(
                "cpu_time_ms",
                r.cpu_time_ms,
                ms(defaults.cpu),
                ms(MIN.cpu),
                ms(self.max.cpu),
            )?),
            memory: pick(
                "memory_bytes",
                r.memory_bytes,
                defaults.memory,
                MIN.memory,
                self.max.memory,
            )?,
            output: pick(
                "output_bytes",
                r.output_bytes,
                defaults.output,
                MIN.output,
                self.max.output,
            )?,
            processes: pick(
                "processes",
                r.processes as u64,
                defaults.processes as u64,
                MIN.processes as u64,
                self.max.processes as u64,
            )? as u32,
            file_size: pick(
                "file_size_bytes",
                r.file_size_bytes,
                defaults.file_size,
                MIN.file_size,
                self.max.file_size,
            )?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> LimitPolicy {
        let l = |s, m| Limits {
            wall: Duration::from_secs(s),
            cpu: Duration::from_secs(s),
            memory: m,
            output: 10,
            processes: 8,
            file_size: 100,
        };
        LimitPolicy {
            run_defaults: l(10, 512),
            compile_defaults: l(30, 1024),
            max: l(60, 64 << 20),
        }
    }

    #[test]
    fn zero_fields_take_defaults_and_lower_values_win() {
        let p = policy();
        let got = p
            .resolve(
                Some(&pb::Limits {
                    wall_time_ms: 500,
                    ..Default::default()
                }),
                &p.run_defaults,
                "limits",
            )
            .unwrap();
        assert_eq!(got.wall, Duration::from_millis(500));
        assert_eq!(got.cpu, Duration::from_secs(10));
        assert_eq!(got.memory, 512);
    }

    #[test]
    fn above_ceiling_names_the_field() {
        let p = policy();
        let err = p
            .resolve(
                Some(&pb::Limits {
                    memory_bytes: 1 << 30,
                    ..Default::default()
                }),
                &p.run_defaults,
                "limits",
            )
            .unwrap_err();
        assert_eq!(
            err,
            LimitError::AboveMax {
                field: "limits.memory_bytes".into(),
                value: 1 << 30,
                max: 64 << 20
            }
        );
    }

    #[test]
    fn below_minimum_names_the_field() {
        let p = policy();
        let err = p
            .resolve(
                Some(&pb::Limits {
                    memory_bytes: 4096,
                    ..Default::default()
                }),
                &p.run_defaults,
                "compile_limits",
            )
            .unwrap_err();
        assert_eq!(err.field(), "compile_limits.memory_bytes");
        assert!(matches!(err, LimitError::BelowMin { min, .. } if min == MIN.memory));
    }
}
