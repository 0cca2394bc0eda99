//! Files read out of a work dir for a reply (`fetch_files` after a run, `GetSessionFiles`):
//! each at most a file cap, all of one reply together at most a total cap, and each charged
//! to the call's share of the byte budget before it is read.

use crate::budget::Charge;
use sandpool_proto::v1 as pb;
use sandpool_sandbox::{FetchError, WorkDir};

/// The caps on one reply's files.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// Largest file returned.
    pub file: u64,
    /// Most bytes returned, all files together.
    pub total: u64,
}

/// Reads `paths` (checked, deduplicated) from `work`: the files returned, and each path
/// not returned with why. Blocking: call it off the async runtime.
pub fn read(
    work: &WorkDir,
    paths: Vec<String>,
    caps: Caps,
    charge: Option<&Charge>,
) -> (Vec<pb::File>, Vec<(String, String)>) {
    let (mut files, mut refused, mut total) = (Vec::new(), Vec::new(), 0u64);
    for path in paths {
        let left = caps.total.saturating_sub(total);
        let cap = caps.file.min(left);
        let read = work.open_file(&path).and_then(|f| {
            // Charged for what will be read, before it is: past the budget, not read at all.
            match charge.map(|c| c.take(f.len().min(cap))) {
                Some(Err(e)) => Err(FetchError::Other(format!("not returned: {e}"))),
                _ => f.read(cap),
            }
        });
        match read {
            Ok(content) => {
                total += content.len() as u64;
                files.push(pb::File {
                    path,
                    content,
                    executable: false,
                });
            }
            Err(FetchError::TooLarge(_)) if left < caps.file => {
                let why = format!("not returned: the files read would exceed {} bytes in all", caps.total);
                refused.push((path, why));
            }
            Err(e) => refused.push((path, e.to_string())),
        }
    }
    (files, refused)
}
