//! Processes of a slot's uid, as the host sees them: how a closing session
//! knows its processes are gone before its slot is handed on.

use crate::engine::Engine;
use std::sync::Arc;
use std::time::Duration;

/// Pids on this host whose real uid is one of `uids`, with that uid (from
/// `/proc/<pid>/status`, which a process cannot hide by making itself undumpable, unlike
/// the owner of `/proc/<pid>`).
pub fn with_uids(uids: &[u32]) -> Vec<(i32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())?;
            uids.contains(&uid).then_some((pid, uid))
        })
        .collect()
}

/// The seats of `seats` (`(sandbox identity, uid)`) that still have a process: by their
/// cgroup where the sandbox can tell ([`crate::sandbox::Runner::seat_busy`], one read each),
/// else by one `/proc` scan for all the others' uids.
fn still_running(sandbox: &dyn crate::sandbox::Runner, seats: &[(usize, u32)]) -> Vec<(usize, u32)> {
    let mut left = Vec::new();
    let mut unknown = Vec::new();
    for &(i, uid) in seats {
        match sandbox.seat_busy(i) {
            Some(true) => left.push((i, uid)),
            Some(false) => {}
            None => unknown.push((i, uid)),
        }
    }
    if !unknown.is_empty() {
        let uids: Vec<u32> = unknown.iter().map(|(_, u)| *u).collect();
        let alive = with_uids(&uids);
        left.extend(unknown.into_iter().filter(|(_, u)| alive.iter().any(|(_, a)| a == u)));
    }
    left
}

/// Waits up to `timeout` for every process of `seats` (`(sandbox identity, uid)`) to be
/// gone; answers the uids that still have some (empty: all gone).
pub async fn wait_gone(engine: &Arc<Engine>, seats: &[(usize, u32)], timeout: Duration) -> Vec<u32> {
    if seats.is_empty() {
        return vec![];
    }
    let until = tokio::time::Instant::now() + timeout;
    let mut left = seats.to_vec();
    loop {
        let (e, l) = (engine.clone(), left.clone());
        left = crate::task::blocking(move || still_running(e.sandbox(), &l))
            .await
            .unwrap_or(left);
        if left.is_empty() {
            return vec![];
        }
        if tokio::time::Instant::now() >= until {
            let mut uids: Vec<u32> = left.iter().map(|(_, u)| *u).collect();
            uids.sort_unstable();
            uids.dedup();
            tracing::warn!(?uids, pids = ?with_uids(&uids), "session processes still alive after close");
            return uids;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
