//! A session's /work: made on first use, the request's files written and read, the session's
//! own directory ([`super::STATE_DIR`]) and the reserve that keeps room for its calls.

use super::{RESERVE_BYTES, STATE_DIR, SessionError, SessionManager};
use crate::engine::Engine;
use crate::error::{ExecError, scrub_host_paths};
use crate::sandbox::WorkDir;
use crate::task::blocking;
use crate::validate;
use sandpool_proto::v1 as pb;
use std::sync::Arc;

/// The file holding [`RESERVE_BYTES`].
pub(super) const RESERVE: &str = ".sandpool/reserve";

/// Makes seat `seat`'s /work (a mount: off the runtime's threads) with `files` and the
/// session's own (the working directory, the reserve); true when the reserve fit.
pub(super) async fn make_work(
    engine: &Arc<Engine>,
    seat: usize,
    files: Vec<pb::File>,
) -> Result<(Arc<WorkDir>, bool), SessionError> {
    let engine = engine.clone();
    blocking(move || {
        let work = engine
            .sandbox()
            .work_dir(seat)
            .map_err(|e| ExecError::Internal(scrub_host_paths(&e.client_message())))?;
        write_files(&work, &files)?;
        // Files that leave no room for these are the request's business: best effort.
        let _ = work.write_file(".sandpool/cwd", b"/work\n", false);
        let reserve_ok = refill_reserve(&work);
        Ok((Arc::new(work), reserve_ok))
    })
    .await?
}

pub(super) fn is_full(e: &crate::sandbox::WorkDirError) -> bool {
    matches!(e, crate::sandbox::WorkDirError::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
}

/// Writes the session's own files into `work`; when /work is full, empties the reserve and
/// tries once more. Ok(true) when the reserve was used (refill it after the call).
///
/// The session's programs can write `.sandpool/` too: each file is written under a new name
/// and renamed into place ([`WorkDir::replace_file`]), so a FIFO, socket or link planted at
/// a name the executor will use next is replaced, never opened (an open of a FIFO waits for
/// a reader, forever). Only a directory planted there fails the call, naming the path.
pub(crate) fn write_state(work: &WorkDir, writes: &[(&str, &[u8])]) -> Result<bool, SessionError> {
    let attempt = || writes.iter().try_for_each(|(p, c)| work.replace_file(p, c, false));
    let internal = |e: crate::sandbox::WorkDirError| ExecError::Internal(scrub_host_paths(&e.to_string())).into();
    match attempt() {
        Ok(()) => Ok(false),
        Err(e) if is_full(&e) => {
            let _ = work.replace_file(RESERVE, b"", false);
            match attempt() {
                Ok(()) => Ok(true),
                Err(e) if is_full(&e) => Err(SessionError::Exhausted(format!(
                    "the session's /work is full: this call's input ({} bytes) does not fit even in the \
                     {RESERVE_BYTES} bytes kept back; free space with a short command (rm)",
                    writes.iter().map(|(_, c)| c.len()).sum::<usize>()
                ))),
                Err(e) => Err(internal(e)),
            }
        }
        Err(e) => Err(internal(e)),
    }
}

/// Fills the reserve again; true when it is whole.
pub(super) fn refill_reserve(work: &WorkDir) -> bool {
    work.replace_file(RESERVE, &vec![0u8; RESERVE_BYTES], false).is_ok()
}

/// Validates files a request writes into a session's /work.
pub(super) fn check_files(files: &[pb::File], field: &str, budget: u64) -> Result<(), ExecError> {
    for (i, f) in files.iter().enumerate() {
        if validate::components(&f.path).first() == Some(&STATE_DIR) {
            return Err(ExecError::invalid(
                format!("{field}[{i}].path"),
                format!("{STATE_DIR}/ is the session's own directory"),
            ));
        }
    }
    // The placeholder source file sits in the session's own directory: no request file clashes.
    validate::files(files, field, ".sandpool/-", 0, budget)
}

/// Writes a request's files into `work`. A file the session's own programs are in the way of
/// (a directory of that name, a link in its path) names its field; a full /work is RESOURCE_EXHAUSTED.
pub(super) fn write_files(work: &WorkDir, files: &[pb::File]) -> Result<(), SessionError> {
    for (i, f) in files.iter().enumerate() {
        if let Err(e) = work.write_file(&f.path, &f.content, f.executable) {
            if is_full(&e) {
                return Err(SessionError::Exhausted(format!(
                    "files[{i}]: the session's /work is full ({} bytes written so far are kept)",
                    files[..i].iter().map(|f| f.content.len()).sum::<usize>()
                )));
            }
            return Err(ExecError::invalid(format!("files[{i}].path"), scrub_host_paths(&e.to_string())).into());
        }
    }
    Ok(())
}

/// Bytes in use in `work`.
pub(super) fn disk_used(work: &WorkDir) -> u64 {
    work.bytes_used()
}

impl SessionManager {
    /// Reads a file of the session's own directory (`.sandpool/...`): at most `max` bytes
    /// from `offset`; None when it is not there.
    pub async fn state_file(
        &self,
        id: &str,
        auth: &[u8],
        path: &str,
        offset: u64,
        max: u64,
    ) -> Result<Option<Vec<u8>>, SessionError> {
        let s = self.find(id, auth)?;
        // Never makes /work: a streamed cell reads its output here while its own call may be
        // making it, and waiting on that (a call not polled meanwhile) hung the session's
        // first cell for good. Without /work nothing is written yet.
        let Some(w) = s.work.get().cloned() else {
            return Ok(None);
        };
        let p = format!("{STATE_DIR}/{path}");
        match blocking(move || w.read_file_at(&p, offset, max)).await? {
            Ok(b) => Ok(Some(b)),
            Err(crate::sandbox::FetchError::NotFound) => Ok(None),
            Err(e) => Err(ExecError::Internal(scrub_host_paths(&e.to_string())).into()),
        }
    }

    /// Writes files into a session's /work.
    pub async fn put_files(
        &self,
        req: pb::PutSessionFilesRequest,
        auth: &[u8],
    ) -> Result<pb::PutSessionFilesResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let s = self.find(&req.session_id, auth)?;
        s.touch();
        let (files, budget, work) = (req.files, s.totals.disk, s.work(&self.engine).await?);
        let used = blocking(move || {
            check_files(&files, "files", budget)?;
            write_files(&work, &files)?;
            Ok::<_, SessionError>(disk_used(&work))
        })
        .await??;
        Ok(pb::PutSessionFilesResponse { disk_used_bytes: used })
    }

    /// Reads files from a session's /work.
    pub async fn get_files(
        &self,
        req: pb::GetSessionFilesRequest,
        auth: &[u8],
        charge: Option<crate::budget::Charge>,
    ) -> Result<pb::GetSessionFilesResponse, SessionError> {
        let _in_progress = self.engine.admission().request();
        let s = self.find(&req.session_id, auth)?;
        s.touch();
        let paths = validate::fetch_files(&req.paths).map_err(|e| match e {
            ExecError::InvalidArgument { field, message } => {
                ExecError::invalid(field.replacen("fetch_files", "paths", 1), message)
            }
            e => e,
        })?;
        let work = s.work(&self.engine).await?;
        let caps = self.engine.fetch_caps();
        let (files, refused) = blocking(move || crate::fetch::read(&work, paths, caps, charge.as_ref())).await?;
        Ok(pb::GetSessionFilesResponse {
            files,
            errors: refused
                .into_iter()
                .map(|(path, message)| pb::SessionFileError { path, message })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_files_stay_out_of_the_session_dir() {
        let f = |p: &str| pb::File {
            path: p.into(),
            content: b"x".to_vec(),
            executable: false,
        };
        let e = check_files(&[f("a.txt"), f("./.sandpool/cwd")], "files", 1 << 20).unwrap_err();
        assert!(e.to_string().starts_with("files[1].path"), "{e}");
        assert!(check_files(&[f("a.txt"), f("src/b.py")], "files", 1 << 20).is_ok());
        let e = check_files(&[f("../x")], "files", 1 << 20).unwrap_err();
        assert!(e.to_string().starts_with("files[0].path"), "{e}");
    }
}
