//! Finding, measuring and killing a run's processes without cgroups.
//!
//! A run is one process group (seccomp keeps its processes from leaving it)
//! whose members are all descendants of the executor: the executor is their
//! child subreaper, so orphans come back to it rather than to the pod's init.
//! A warm run's leader is a child of the slot's zygote (itself the executor's
//! child), so the walk starts at the leader too.
//! The group is walked from the run's leader and from the executor's own
//! children through `/proc/<pid>/task/<tid>/children`, never by scanning all
//! of `/proc`, so the cost follows the run's size and not the machine's.

use crate::sys::process;
use std::time::Duration;

/// What `/proc/<pid>/stat` says of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pgid: i32,
    /// utime + stime + cutime + cstime, in clock ticks.
    pub cpu_ticks: u64,
}

/// Parses the fields after the command name (which may hold spaces and parentheses).
pub fn parse_stat(s: &str) -> Option<Stat> {
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state): field n is f[n - 3].
    let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        pgid: f.get(2)?.parse().ok()?,
        cpu_ticks: num(14)? + num(15)? + num(16)? + num(17)?,
    })
}

fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The children of every thread of `pid`.
fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return vec![];
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// The live (or zombie) members of process group `pgid` among the
/// executor's descendants, with what their `stat` says: the group's leader (pid
/// `pgid`), its descendants in the group, and the executor's children in the group.
pub fn members(pgid: i32) -> Vec<(i32, Stat)> {
    let mut out = Vec::new();
    let mut queue: Vec<i32> = children(std::process::id() as i32);
    queue.push(pgid);
    let mut seen = std::collections::HashSet::new();
    while let Some(pid) = queue.pop() {
        if !seen.insert(pid) {
            continue;
        }
        match stat(pid) {
            Some(s) if s.pgid == pgid => {
                out.push((pid, s));
                queue.extend(children(pid));
            }
            _ => {}
        }
    }
    out
}

/// One look at a run's processes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    pub cpu: Duration,
    /// Resident memory of all members together.
    pub rss: u64,
    /// The largest resident memory of one member: what a per-process limit (`RLIMIT_DATA`)
    /// is near. Summed, processes that share pages (a fork's copy-on-write, a warm run's
    /// zygote) count them once each.
    pub rss_max: u64,
    /// The largest private writable size (`RLIMIT_DATA`'s measure) of one member.
    pub data: u64,
}

fn clock_ticks() -> u64 {
    process::sysconf(libc::_SC_CLK_TCK).unwrap_or(100)
}

fn page_size() -> u64 {
    process::sysconf(libc::_SC_PAGESIZE).unwrap_or(4096)
}

/// CPU time and memory of the group now.
pub fn sample(pgid: i32) -> Sample {
    let (tck, page) = (clock_ticks(), page_size());
    let mut s = Sample::default();
    for (pid, st) in members(pgid) {
        s.cpu += Duration::from_nanos(st.cpu_ticks * 1_000_000_000 / tck);
        // statm: size resident shared text lib data dt, in pages.
        if let Ok(m) = std::fs::read_to_string(format!("/proc/{pid}/statm")) {
            let f: Vec<u64> = m.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            let rss = f.get(1).copied().unwrap_or(0) * page;
            s.rss += rss;
            s.rss_max = s.rss_max.max(rss);
            s.data = s.data.max(f.get(5).copied().unwrap_or(0) * page);
        }
    }
    s
}

/// Threads (what `RLIMIT_NPROC` counts) of processes whose real uid is `uid`
/// that this executor can see: its own threads and every run's.
pub fn tasks_of_uid(uid: u32) -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("status")).ok())
        .filter(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u32>().ok())
                == Some(uid)
        })
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}

/// SIGKILLs process group `pgid`.
///
/// Sound only while the group's leader is unreaped (or some member lives):
/// until then the number cannot name another group.
pub fn kill_group(pgid: i32) {
    process::sigkill(-pgid);
}

/// SIGKILLs the run whose leader is `leader`: the leader itself too, which a warm
/// run's leader needs until it has made its group (`setsid`, before the program).
///
/// Sound only while the leader is unreaped, as [`kill_group`].
pub fn kill_run(leader: i32) {
    process::sigkill(leader);
    kill_group(leader);
}

fn add(a: &mut libc::rusage, b: &libc::rusage) {
    let tv = |t: libc::timeval| t.tv_sec * 1_000_000 + t.tv_usec;
    let back = |us: i64| libc::timeval {
        tv_sec: (us / 1_000_000) as _,
        tv_usec: (us % 1_000_000) as _,
    };
    a.ru_utime = back(tv(a.ru_utime) + tv(b.ru_utime));
    a.ru_stime = back(tv(a.ru_stime) + tv(b.ru_stime));
    a.ru_maxrss = a.ru_maxrss.max(b.ru_maxrss);
}

/// Kills every member of group `pgid` but `leader` (which the caller reaps
/// last, so the group's number stays its own), reaps those that are the
/// executor's children, and returns their summed rusage.
///
/// Blocking: run off the async runtime.
pub fn sweep(pgid: i32, leader: i32) -> libc::rusage {
    let mut total = process::zero_rusage();
    let me = std::process::id() as i32;
    let started = std::time::Instant::now();
    loop {
        kill_group(pgid);
        let left: Vec<i32> = members(pgid)
            .into_iter()
            .map(|(p, _)| p)
            .filter(|&p| p != leader)
            .collect();
        if left.is_empty() {
            return total;
        }
        let mut reaped = false;
        for pid in left {
            // Only our own children: the rest are reaped by their parents or
            // come back to us when those die.
            let ours = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s[s.rfind(')')? + 1..].split_whitespace().nth(1)?.parse::<i32>().ok())
                == Some(me);
            if !ours {
                continue;
            }
            // WNOHANG never blocks.
            if let Ok((r, _, ru)) = process::wait4(pid, true)
                && r == pid
            {
                add(&mut total, &ru);
                reaped = true;
            }
        }
        if started.elapsed() > Duration::from_secs(10) {
            tracing::error!(pgid, "processes of a run survive SIGKILL; giving up on them");
            return total;
        }
        if !reaped {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Adds `b`'s CPU times and peak to `a`.
pub fn merge(a: &mut libc::rusage, b: &libc::rusage) {
    add(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_hostile_command_names() {
        let line = "1234 (a) b (c) 1 2) S 1 77 77 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0 99 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(Stat {
                pgid: 77,
                cpu_ticks: 310
            })
        );
        assert_eq!(parse_stat("1234 (x"), None);
        assert_eq!(parse_stat("1234 (x) S 1"), None);
    }

    #[test]
    fn a_group_is_found_measured_and_swept() {
        use std::os::unix::process::CommandExt;
        // A leader with a child of its own, in a group of its own.
        let mut leader = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30"])
            .process_group(0)
            .spawn()
            .expect("sh");
        let pgid = leader.id() as i32;
        let t = std::time::Instant::now();
        while members(pgid).len() < 3 && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(members(pgid).len(), 3, "sh and two sleeps");
        assert!(sample(pgid).rss > 0);
        sweep(pgid, pgid);
        assert_eq!(
            members(pgid).iter().map(|m| m.0).collect::<Vec<_>>(),
            vec![pgid],
            "only the unreaped leader is left"
        );
        let _ = leader.wait();
        assert!(members(pgid).is_empty());
    }
}
