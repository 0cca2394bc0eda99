//! Per-run limits: the spec's durations and quantities in the executor's units, checked
//! against each other and against the container's memory, so the executor never has to
//! lower one silently.

use super::executor_defaults;
use super::invalid::InvalidSpec;
use crate::crd::RunLimits;
use crate::units::{self, show_bytes, show_ms};

/// Largest run time the pool allows when `limits.maxWallTime` is unset (the executor's own
/// `--max-wall-time-ms` default, so a pool and a bare executor agree).
pub const DEFAULT_MAX_WALL_TIME_MS: u64 = executor_defaults::MAX_WALL_TIME_MS;

/// Per-run limits in the executor's units. `None` leaves the executor's own default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResolvedLimits {
    /// `--default-wall-time-ms`.
    pub wall_time_ms: Option<u64>,
    /// `--max-wall-time-ms`; always set because it sizes the drain and termination grace.
    pub max_wall_time_ms: u64,
    /// `--default-cpu-time-ms`.
    pub cpu_time_ms: Option<u64>,
    /// `--max-cpu-time-ms`.
    pub max_cpu_time_ms: Option<u64>,
    /// `--default-memory-bytes`.
    pub memory_bytes: Option<u64>,
    /// `--max-memory-bytes`.
    pub max_memory_bytes: Option<u64>,
    /// `--default-output-bytes`.
    pub output_bytes: Option<u64>,
    /// `--max-output-bytes`.
    pub max_output_bytes: Option<u64>,
    /// `--default-processes`.
    pub processes: Option<u64>,
    /// `--max-processes`.
    pub max_processes: Option<u64>,
}

pub(super) fn resolve_limits(
    spec: &RunLimits,
    container_memory: Option<u64>,
    headroom: u64,
) -> Result<ResolvedLimits, InvalidSpec> {
    let ms = |field: &str, value: &Option<String>| -> Result<Option<u64>, InvalidSpec> {
        value
            .as_deref()
            .map(|text| units::duration_ms(text).map_err(|e| InvalidSpec::new(field, e)))
            .transpose()
    };
    let bytes = |field: &str, value: &Option<String>| -> Result<Option<u64>, InvalidSpec> {
        value
            .as_deref()
            .map(|text| units::bytes(text).map_err(|e| InvalidSpec::new(field, e)))
            .transpose()
    };
    let count = |field: &str, value: Option<i32>| -> Result<Option<u64>, InvalidSpec> {
        value
            .map(|n| {
                u64::try_from(n)
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| InvalidSpec::new(field, "must be at least 1"))
            })
            .transpose()
    };
    let mut max_memory = bytes("spec.limits.maxMemory", &spec.max_memory)?;
    let mut max_memory_origin = "";
    if let Some(container) = container_memory {
        let room = container
            .checked_sub(headroom)
            .filter(|room| *room > 0)
            .ok_or_else(|| {
                InvalidSpec::new(
                    "spec.resources.limits[\"memory\"]",
                    format!("must exceed the executor's own headroom of {}", show_bytes(headroom)),
                )
            })?;
        match max_memory {
            Some(max) if max > room => {
                return Err(InvalidSpec::new(
                    "spec.limits.maxMemory",
                    format!(
                        "{} does not fit spec.resources.limits[\"memory\"] ({}) less the executor's own headroom of {}",
                        show_bytes(max),
                        show_bytes(container),
                        show_bytes(headroom)
                    ),
                ));
            }
            Some(_) => {}
            None if room < executor_defaults::MEMORY_BYTES.1 => {
                max_memory = Some(room);
                max_memory_origin = " (derived from spec.resources.limits[\"memory\"] less the executor's headroom)";
            }
            None => {}
        }
    }
    let mut limits = ResolvedLimits {
        wall_time_ms: ms("spec.limits.wallTime", &spec.wall_time)?,
        max_wall_time_ms: ms("spec.limits.maxWallTime", &spec.max_wall_time)?.unwrap_or(DEFAULT_MAX_WALL_TIME_MS),
        cpu_time_ms: ms("spec.limits.cpuTime", &spec.cpu_time)?,
        max_cpu_time_ms: ms("spec.limits.maxCpuTime", &spec.max_cpu_time)?,
        memory_bytes: bytes("spec.limits.memory", &spec.memory)?,
        max_memory_bytes: max_memory,
        output_bytes: bytes("spec.limits.output", &spec.output)?,
        max_output_bytes: bytes("spec.limits.maxOutput", &spec.max_output)?,
        processes: count("spec.limits.processes", spec.processes)?,
        max_processes: count("spec.limits.maxProcesses", spec.max_processes)?,
    };
    let show_ms: fn(u64) -> String = show_ms;
    let show_bytes: fn(u64) -> String = show_bytes;
    let show_count: fn(u64) -> String = |n| n.to_string();
    let executor_max = " (the executor's default maximum)";
    let executor_max_if = |unset: bool| if unset { executor_max } else { "" };
    let wall_origin = if spec.max_wall_time.is_none() {
        " (the default maximum)"
    } else {
        ""
    };
    // (default field, its value, the executor's default, max field, max in force, where
    // the max came from, formatter)
    let pairs = [
        (
            "wallTime",
            &mut limits.wall_time_ms,
            executor_defaults::WALL_TIME_MS,
            "maxWallTime",
            limits.max_wall_time_ms,
            wall_origin,
            show_ms,
        ),
        (
            "cpuTime",
            &mut limits.cpu_time_ms,
            executor_defaults::CPU_TIME_MS.0,
            "maxCpuTime",
            limits.max_cpu_time_ms.unwrap_or(executor_defaults::CPU_TIME_MS.1),
            executor_max_if(limits.max_cpu_time_ms.is_none()),
            show_ms,
        ),
        (
            "memory",
            &mut limits.memory_bytes,
            executor_defaults::MEMORY_BYTES.0,
            "maxMemory",
            limits.max_memory_bytes.unwrap_or(executor_defaults::MEMORY_BYTES.1),
            if spec.max_memory.is_some() {
                ""
            } else if max_memory_origin.is_empty() {
                executor_max
            } else {
                max_memory_origin
            },
            show_bytes,
        ),
        (
            "output",
            &mut limits.output_bytes,
            executor_defaults::OUTPUT_BYTES.0,
            "maxOutput",
            limits.max_output_bytes.unwrap_or(executor_defaults::OUTPUT_BYTES.1),
            executor_max_if(limits.max_output_bytes.is_none()),
            show_bytes,
        ),
        (
            "processes",
            &mut limits.processes,
            executor_defaults::PROCESSES.0,
            "maxProcesses",
            limits.max_processes.unwrap_or(executor_defaults::PROCESSES.1),
            executor_max_if(limits.max_processes.is_none()),
            show_count,
        ),
    ];
    for (field, value, executor_default, max_field, max, origin, show) in pairs {
        match *value {
            Some(v) if v > max => {
                return Err(InvalidSpec::new(
                    format!("spec.limits.{field}"),
                    format!(
                        "{} exceeds spec.limits.{max_field} of {}{origin}; the executor would lower it silently",
                        show(v),
                        show(max)
                    ),
                ));
            }
            // The executor would lower its own default to the maximum; say so in its flags.
            None if executor_default > max => *value = Some(max),
            _ => {}
        }
    }
    Ok(limits)
}
