//! Processes of a slot's uid, as the host sees them: how a closing session
//! knows its processes are gone before its slot is handed on.

use std::time::Duration;

/// Pids on this host whose real uid is `uid` (from `/proc/<pid>/status`, which a
/// process cannot hide by making itself undumpable, unlike the owner of `/proc/<pid>`).
pub fn with_uid(uid: u32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("Uid:"))
                        .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())
                })
                == Some(uid)
        })
        .collect()
}

/// Waits up to `timeout` for every process of `uid` to be gone; true when they are.
pub async fn wait_gone(uid: u32, timeout: Duration) -> bool {
    let until = tokio::time::Instant::now() + timeout;
    loop {
        let left = crate::task::blocking(move || with_uid(uid)).await.unwrap_or_default();
        if left.is_empty() {
            return true;
        }
        if tokio::time::Instant::now() >= until {
            tracing::warn!(uid, pids = ?left, "session processes still alive after close");
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
