//! Processes of a slot's uid, as the host sees them: how a closing session
//! knows its processes are gone before its slot is handed on.

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

/// Waits up to `timeout` for every process of `uids` to be gone; answers the uids that
/// still have some (empty: all gone).
pub async fn wait_gone(uids: &[u32], timeout: Duration) -> Vec<u32> {
    let until = tokio::time::Instant::now() + timeout;
    let uids = uids.to_vec();
    loop {
        let u = uids.clone();
        let left = crate::task::blocking(move || with_uids(&u)).await.unwrap_or_default();
        if left.is_empty() {
            return vec![];
        }
        if tokio::time::Instant::now() >= until {
            tracing::warn!(pids = ?left, "session processes still alive after close");
            let mut alive: Vec<u32> = left.iter().map(|(_, uid)| *uid).collect();
            alive.sort_unstable();
            alive.dedup();
            return alive;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
