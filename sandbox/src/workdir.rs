//! A run's work dir: a fresh, size-capped tmpfs owned by the run's uid.
//!
//! The tmpfs is created detached (`fsopen`/`fsmount`): it never appears in
//! the host's mount table, and each phase's init attaches a clone of it at
//! `/work` inside the slot's namespace. The supervisor touches it only
//! through the mount's descriptor with `openat2(RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS)`, so nothing the program plants (symlinks, FIFOs,
//! hard links) can redirect a read or a write, and clean-up is closing the
//! descriptor: nothing is traversed at all.

use crate::sys::mount;
use std::ffi::CString;
use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// Errors creating or using a work dir.
#[derive(Debug, thiserror::Error)]
pub enum WorkDirError {
    #[error("invalid path {0:?}: must be relative, without '..' or NUL")]
    InvalidPath(String),
    /// Something other than a regular file (a FIFO, socket, device, link) or a directory is
    /// where the executor reads or writes: refused, never opened for data.
    #[error("work dir {path}: not a regular file (a FIFO, socket, device or link there is refused)")]
    NotRegular { path: String },
    #[error("work dir {path}: {what}: {source}")]
    Io {
        path: String,
        what: &'static str,
        source: std::io::Error,
    },
}

/// Why a requested file was not fetched.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchError {
    #[error("not found")]
    NotFound,
    #[error("not a regular file (links are never followed)")]
    NotRegular,
    #[error("larger than the {0}-byte cap")]
    TooLarge(u64),
    #[error("{0}")]
    Other(String),
}

/// Checks that `p` is a relative path that stays inside the work dir.
pub fn validate_rel_path(p: &str) -> Result<(), WorkDirError> {
    let bad = p.is_empty()
        || p.starts_with('/')
        || p.contains('\0')
        || p.split('/').any(|c| c == "..")
        || p.split('/').all(|c| c.is_empty() || c == ".");
    if bad {
        Err(WorkDirError::InvalidPath(p.to_owned()))
    } else {
        Ok(())
    }
}

/// A run's `/work`: a detached tmpfs (mode `namespaces`) or a private host
/// directory (runners that cannot mount); released when dropped.
///
/// Files are written and read through `openat2` beneath the root descriptor,
/// never by host path, so what a program planted (symlinks, FIFOs) is not followed.
#[derive(Debug)]
pub struct WorkDir {
    /// The tmpfs mount, or the directory, that is the work dir's root (taken only by drop,
    /// to be closed off the async runtime).
    mount: Option<OwnedFd>,
    /// For a directory work dir: its host path, removed on drop.
    dir: Option<std::path::PathBuf>,
    uid: u32,
    gid: u32,
    /// Kernels before 6.15 clone only mounts attached in the caller's namespace:
    /// there the tmpfs is attached under this private directory (see [`Staging`]).
    staging: Option<std::sync::Arc<Staging>>,
    /// Where it was attached, once a clone needed it.
    attached: std::sync::OnceLock<std::path::PathBuf>,
}

/// Where work dirs are attached on kernels that cannot clone a detached mount
/// (`open_tree(OPEN_TREE_CLONE)` of an `fsmount` before Linux 6.15 fails with
/// EINVAL): a private bind mount under the executor's work root, so nothing
/// attached there propagates to other mount namespaces. Detached on drop.
#[derive(Debug)]
pub(crate) struct Staging {
    dir: std::path::PathBuf,
    next: std::sync::atomic::AtomicU64,
}

impl Staging {
    /// Returns None when this kernel clones detached mounts (nothing to stage), else
    /// makes `dir` a private mount (replacing what a crashed executor left there).
    pub(crate) fn if_needed(dir: &std::path::Path) -> std::io::Result<Option<Self>> {
        let probe = WorkDir::create(4096, 0, 0).map_err(std::io::Error::other)?;
        match probe.clone_mount() {
            Ok(_) => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
        tracing::info!(dir = %dir.display(), "this kernel cannot clone detached mounts: work dirs are attached privately");
        mount::detach_all(dir);
        fs::create_dir_all(dir)?;
        // Runs' files are the runs' business: nobody else on the machine walks in.
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        mount::mount(Some(dir), dir, None, libc::MS_BIND, None)?;
        mount::mount(None, dir, None, libc::MS_PRIVATE, None)?;
        Ok(Some(Staging {
            dir: dir.to_owned(),
            next: std::sync::atomic::AtomicU64::new(0),
        }))
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        mount::detach_all(&self.dir);
    }
}

/// Runs `f`, blocking clean-up (a work dir's removal: a detached tmpfs's last close waits for
/// an RCU grace period, a directory on disk is removed file by file), without holding up the
/// async runtime: on a worker of a multi-threaded runtime through `block_in_place`, which
/// hands the worker's other tasks to another thread first; elsewhere (a blocking-pool thread,
/// a current-thread runtime, no runtime) as it is. It stays synchronous, so what it frees is
/// gone before the caller goes on (a slot's cgroup must not see an old work dir's pages when
/// the slot's next run sets its limit).
pub(crate) fn off_the_runtime<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        // A run decides how much there is to remove (30,000 files: 70 ms in a tmpfs, 0.3 s on
        // disk, measured): never on an async worker.
        let mount = self.mount.take();
        off_the_runtime(|| {
            if let Some(p) = self.attached.get() {
                mount::detach_all(p);
                let _ = fs::remove_dir(p);
            }
            // The detached tmpfs dissolves with its last descriptor.
            drop(mount);
            if let Some(dir) = &self.dir {
                // remove_dir_all does not follow symlinks a program left behind.
                if let Err(e) = fs::remove_dir_all(dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "could not remove a work dir");
                }
            }
        });
    }
}

impl WorkDir {
    /// The work dir's root: a descriptor that lives as long as the work dir.
    fn root(&self) -> BorrowedFd<'_> {
        match &self.mount {
            Some(fd) => fd.as_fd(),
            None => unreachable!("a work dir's root is taken only when it is dropped"),
        }
    }
}

/// `openat2` beneath `dir` (see [`mount::openat2_beneath`]).
fn openat2(dir: BorrowedFd<'_>, path: &str, flags: i32, mode: u32) -> std::io::Result<OwnedFd> {
    mount::openat2_beneath(dir, path, flags, mode)
}

impl WorkDir {
    /// Whether it is a tmpfs (writes are memory copies that never wait on a disk), not a
    /// host directory.
    pub fn in_memory(&self) -> bool {
        self.dir.is_none()
    }

    /// Creates a detached tmpfs of `size` bytes, owned by `uid:gid`, nosuid and nodev.
    pub(crate) fn create(size: u64, uid: u32, gid: u32) -> Result<Self, WorkDirError> {
        let e = |what| io_at("/work", what);
        let opts = [
            ("size", size.to_string()),
            ("mode", "0755".into()),
            ("uid", uid.to_string()),
            ("gid", gid.to_string()),
        ];
        let mount = mount::tmpfs_detached(&opts).map_err(|(what, source)| e(what)(source))?;
        Ok(WorkDir {
            mount: Some(mount),
            dir: None,
            uid,
            gid,
            staging: None,
            attached: std::sync::OnceLock::new(),
        })
    }

    /// Uses `path`, a directory that must not exist yet, as a work dir owned
    /// by `uid:gid` (mode 0700); the directory and everything in it are
    /// removed on drop. For runners that cannot mount (and tests).
    pub(crate) fn directory(path: std::path::PathBuf, uid: u32, gid: u32) -> Result<Self, WorkDirError> {
        let e = |what| io_at("/work", what);
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(e("creating the work dir"))?;
        let fd = fs::File::open(&path).map_err(e("opening the work dir"))?;
        std::os::unix::fs::fchown(&fd, Some(uid), Some(gid)).map_err(e("handing the work dir to the run's uid"))?;
        Ok(WorkDir {
            mount: Some(fd.into()),
            dir: Some(path),
            uid,
            gid,
            staging: None,
            attached: std::sync::OnceLock::new(),
        })
    }

    /// Bytes in use: the tmpfs's used blocks, or for a directory work dir the
    /// sizes of its regular files (nested at most [`COPY_MAX_DEPTH`] deep).
    pub fn bytes_used(&self) -> u64 {
        match &self.dir {
            None => nix::sys::statfs::fstatfs(self.root())
                .map(|st| (st.blocks().saturating_sub(st.blocks_free())).saturating_mul(st.block_size() as u64))
                .unwrap_or(0),
            Some(dir) => dir_bytes(dir, 0),
        }
    }

    /// The host path of a directory work dir (None for a detached tmpfs).
    pub fn host_path(&self) -> Option<&std::path::Path> {
        self.dir.as_deref()
    }

    /// Whether nothing of this work dir can be seen from outside the executor: a detached
    /// tmpfs, never attached anywhere. Its removal may wait until after the response; a
    /// host directory or an attached mount is removed before it ("nothing left behind").
    pub fn is_unseen(&self) -> bool {
        self.dir.is_none() && self.attached.get().is_none()
    }

    /// Attaches the mount under `staging` when a clone needs it (old kernels).
    pub(crate) fn staged(mut self, staging: Option<std::sync::Arc<Staging>>) -> Self {
        self.staging = staging;
        self
    }

    /// A detached clone of the mount, for one phase's init to attach at /work.
    pub(crate) fn attachable(&self) -> std::io::Result<OwnedFd> {
        if self.dir.is_some() {
            return Err(std::io::Error::other(
                "a directory work dir cannot be attached as a mount",
            ));
        }
        let Some(staging) = &self.staging else {
            return self.clone_mount();
        };
        if self.attached.get().is_none() {
            let n = staging.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = staging.dir.join(n.to_string());
            fs::create_dir_all(&path)?;
            let c = mount::c_path(&path)?;
            // Our own mount fd stays valid and now names the attached mount.
            crate::sys::raw::move_mount_fd(self.root().as_raw_fd(), &c).map_err(std::io::Error::from_raw_os_error)?;
            let _ = self.attached.set(path);
        }
        self.clone_mount()
    }

    fn clone_mount(&self) -> std::io::Result<OwnedFd> {
        mount::clone_mount(self.root())
    }

    /// Writes `content` at relative `rel`, creating parent directories, owned by the run's uid.
    ///
    /// What is already at `rel` must be a regular file (it is truncated): a FIFO, socket,
    /// device or link a program planted there is refused with [`WorkDirError::NotRegular`],
    /// never written to (the open is non-blocking and no-follow, and the type is checked on
    /// the descriptor before a byte is written), so nothing here waits on the sandbox.
    pub fn write_file(&self, rel: &str, content: &[u8], executable: bool) -> Result<(), WorkDirError> {
        validate_rel_path(rel)?;
        let e = |what| io_at(rel, what);
        self.make_parents(rel)?;
        let mode = if executable { 0o755 } else { 0o644 };
        // No O_TRUNC: nothing is changed before the type is known. O_NONBLOCK: a FIFO with no
        // reader (and a socket) fails with ENXIO instead of waiting for one.
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK;
        let fd = match openat2(self.root(), rel, flags, mode) {
            Ok(fd) => fd,
            Err(err) if refused_type(&err) => return Err(WorkDirError::NotRegular { path: rel.to_owned() }),
            Err(err) => return Err(e("creating")(err)),
        };
        let file = fs::File::from(fd);
        if !file.metadata().map_err(e("inspecting"))?.is_file() {
            return Err(WorkDirError::NotRegular { path: rel.to_owned() });
        }
        file.set_len(0).map_err(e("truncating"))?;
        self.finish(&file, content, mode).map_err(e("writing"))
    }

    /// Writes `content` at `rel` as a new file that then takes the name over (a temporary
    /// name created with `O_EXCL` in the same directory, renamed onto `rel`): whatever a
    /// program left at `rel` (a FIFO, socket, link, a file it holds open or linked
    /// elsewhere) is replaced, never opened. For the executor's own files in a session's
    /// `/work` (its requests to the interpreter, the cell), which the session's programs
    /// can write too; only a directory at `rel` is refused ([`WorkDirError::NotRegular`]).
    pub fn replace_file(&self, rel: &str, content: &[u8], executable: bool) -> Result<(), WorkDirError> {
        validate_rel_path(rel)?;
        let e = |what| io_at(rel, what);
        self.make_parents(rel)?;
        let (parent, name) = match rel.trim_end_matches('/').rsplit_once('/') {
            Some((p, n)) => (p, n),
            None => (".", rel.trim_end_matches('/')),
        };
        let dir = openat2(
            self.root(),
            parent,
            libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW,
            0,
        )
        .map_err(|err| {
            if refused_type(&err) || err.raw_os_error() == Some(libc::ENOTDIR) {
                WorkDirError::NotRegular {
                    path: parent.to_owned(),
                }
            } else {
                e("opening its directory")(err)
            }
        })?;
        let target = CString::new(name).map_err(|_| WorkDirError::InvalidPath(rel.to_owned()))?;
        let mode = if executable { 0o755 } else { 0o644 };
        // A name nobody can guess; O_EXCL fails on anything already there (never follows
        // it), so a planted entry costs a retry, not an open.
        let mut tries = 0;
        let (tmp, file) = loop {
            let tmp = format!(".sandpool-new-{}", unique_suffix());
            let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_NONBLOCK;
            match openat2(dir.as_fd(), &tmp, flags, mode) {
                Ok(fd) => break (tmp, fs::File::from(fd)),
                Err(err) if err.raw_os_error() == Some(libc::EEXIST) && tries < 8 => tries += 1,
                Err(err) => return Err(e("creating")(err)),
            }
        };
        let tmp = CString::new(tmp).map_err(|_| WorkDirError::InvalidPath(rel.to_owned()))?;
        let written = self.finish(&file, content, mode).map_err(e("writing")).and_then(|()| {
            mount::rename_in(dir.as_fd(), &tmp, &target).map_err(|err| match err.raw_os_error() {
                Some(libc::EISDIR) | Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => {
                    WorkDirError::NotRegular { path: rel.to_owned() }
                }
                _ => e("renaming into place")(err),
            })
        });
        if written.is_err() {
            let _ = mount::unlink_in(dir.as_fd(), &tmp);
        }
        written
    }

    /// Creates the parent directories of `rel` (owned by the run's uid) where missing.
    fn make_parents(&self, rel: &str) -> Result<(), WorkDirError> {
        let e = |what| io_at(rel, what);
        let parts: Vec<&str> = rel.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
        let mut prefix = String::new();
        for comp in &parts[..parts.len().saturating_sub(1)] {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(comp);
            let c = CString::new(prefix.as_str()).map_err(|_| WorkDirError::InvalidPath(rel.to_owned()))?;
            // EEXIST is fine: the directory is there already.
            if mount::mkdirat(self.root(), &c, 0o755).is_ok() {
                let d = openat2(
                    self.root(),
                    &prefix,
                    libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW,
                    0,
                )
                .map_err(e("opening a directory"))?;
                let _ = std::os::unix::fs::fchown(&d, Some(self.uid), Some(self.gid));
            }
        }
        Ok(())
    }

    /// Hands a new or emptied regular file to the run's uid with `mode` and writes `content`.
    fn finish(&self, file: &fs::File, content: &[u8], mode: u32) -> std::io::Result<()> {
        let _ = std::os::unix::fs::fchown(file, Some(self.uid), Some(self.gid));
        use std::os::unix::fs::PermissionsExt;
        let _ = file.set_permissions(fs::Permissions::from_mode(mode));
        // O_NONBLOCK means nothing for a regular file: this write does not stop half-way.
        let mut f = file;
        f.write_all(content)
    }

    /// Reads regular file `rel` if it is at most `cap` bytes; never follows links.
    pub fn read_file(&self, rel: &str, cap: u64) -> Result<Vec<u8>, FetchError> {
        self.open_file(rel)?.read(cap)
    }

    /// At most `max` bytes of regular file `rel` from byte `offset` (fewer at its end), never
    /// following links: a file that grows is read a piece at a time, not whole each time.
    pub fn read_file_at(&self, rel: &str, offset: u64, max: u64) -> Result<Vec<u8>, FetchError> {
        self.open_file(rel)?.read_at(offset, max)
    }

    /// Opens regular file `rel` for reading, never following links: its size can be
    /// weighed (charged, say) before it is read.
    pub fn open_file(&self, rel: &str) -> Result<OpenFile, FetchError> {
        validate_rel_path(rel).map_err(|e| FetchError::Other(e.to_string()))?;
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
        let fd = match openat2(self.root(), rel, flags, 0) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(FetchError::NotFound),
            Err(e) if refused_type(&e) => return Err(FetchError::NotRegular),
            Err(e) => return Err(FetchError::Other(e.to_string())),
        };
        let file = fs::File::from(fd);
        let meta = file.metadata().map_err(|e| FetchError::Other(e.to_string()))?;
        if !meta.is_file() {
            return Err(FetchError::NotRegular);
        }
        Ok(OpenFile { file, len: meta.len() })
    }
}

/// Whether an open failed because of what is at the path, not how it was asked: a link
/// (ELOOP: `O_NOFOLLOW`, `RESOLVE_NO_SYMLINKS`), a way out of the work dir (EXDEV), a FIFO
/// with no reader or a socket opened non-blocking (ENXIO), a device with no driver (ENODEV).
fn refused_type(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ELOOP) | Some(libc::EXDEV) | Some(libc::ENXIO) | Some(libc::ENODEV)
    )
}

/// The [`WorkDirError::Io`] of `what` failing at `path`, for `map_err`.
fn io_at(path: &str, what: &'static str) -> impl FnOnce(std::io::Error) -> WorkDirError {
    let path = path.to_owned();
    move |source| WorkDirError::Io { path, what, source }
}

/// A suffix no program in the sandbox can predict: the process, a counter and the clock.
fn unique_suffix() -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut r = [0u8; 8];
    let _ = getrandom::fill(&mut r);
    format!("{}-{n}-{:016x}", std::process::id(), u64::from_ne_bytes(r))
}

/// A regular file of a work dir, open for reading.
#[derive(Debug)]
pub struct OpenFile {
    file: fs::File,
    len: u64,
}

impl OpenFile {
    /// Its size when it was opened.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// At most `max` bytes from `offset`.
    pub fn read_at(mut self, offset: u64, max: u64) -> Result<Vec<u8>, FetchError> {
        use std::io::{Seek, SeekFrom};
        let other = |e: std::io::Error| FetchError::Other(e.to_string());
        self.file.seek(SeekFrom::Start(offset)).map_err(other)?;
        let mut buf = Vec::with_capacity(self.len.saturating_sub(offset).min(max) as usize);
        (&mut self.file).take(max).read_to_end(&mut buf).map_err(other)?;
        Ok(buf)
    }

    /// Its content, if at most `cap` bytes (also if it grew since it was opened).
    pub fn read(mut self, cap: u64) -> Result<Vec<u8>, FetchError> {
        if self.len > cap {
            return Err(FetchError::TooLarge(cap));
        }
        let mut buf = Vec::with_capacity(self.len as usize);
        (&mut self.file)
            .take(cap + 1)
            .read_to_end(&mut buf)
            .map_err(|e| FetchError::Other(e.to_string()))?;
        if buf.len() as u64 > cap {
            return Err(FetchError::TooLarge(cap));
        }
        Ok(buf)
    }
}

/// Sizes of the regular files under `dir`, not following symlinks.
fn dir_bytes(dir: &std::path::Path, depth: usize) -> u64 {
    if depth > COPY_MAX_DEPTH {
        return 0;
    }
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path(), depth + 1),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}

/// Deepest directory nesting [`WorkDir::copy_from`] and [`WorkDir::export_to`] follow.
const COPY_MAX_DEPTH: usize = 32;

/// What a no-follow walk of a work dir meets, by path relative to its root.
enum Found<'a> {
    /// A directory, met before its entries.
    Dir(&'a str),
    /// A regular file, opened (no-follow, non-blocking), and whether any execute bit is set.
    File(&'a str, fs::File, bool),
}

/// Walks `dir` through descriptors with no-follow opens, calling `visit` for every directory
/// and regular file: symlinks, FIFOs, sockets and devices a program planted are skipped,
/// never followed, and nesting deeper than [`COPY_MAX_DEPTH`] is an error.
fn walk(
    dir: OwnedFd,
    prefix: &str,
    depth: usize,
    visit: &mut dyn FnMut(Found<'_>) -> Result<(), WorkDirError>,
) -> Result<(), WorkDirError> {
    use std::os::unix::fs::PermissionsExt;
    let io = io_at;
    if depth > COPY_MAX_DEPTH {
        return Err(io(prefix, "copying")(std::io::Error::other(
            "directories nested too deeply",
        )));
    }
    let mut listing = nix::dir::Dir::from_fd(dir).map_err(|e| io(prefix, "listing")(e.into()))?;
    let mut entries = Vec::new();
    for entry in listing.iter() {
        let entry = entry.map_err(|e| io(prefix, "listing")(e.into()))?;
        let Ok(name) = entry.file_name().to_str() else {
            continue;
        };
        if name != "." && name != ".." {
            entries.push(name.to_owned());
        }
    }
    for name in entries {
        let rel = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        // O_PATH|O_NOFOLLOW opens the entry itself, whatever it is, so fstat tells what it is.
        let Ok(probe) = openat2(listing.as_fd(), &name, libc::O_PATH | libc::O_NOFOLLOW, 0) else {
            continue;
        };
        let meta = fs::File::from(probe).metadata().map_err(io(&rel, "inspecting"))?;
        let ft = meta.file_type();
        if ft.is_dir() {
            visit(Found::Dir(&rel))?;
            let sub = openat2(
                listing.as_fd(),
                &name,
                libc::O_DIRECTORY | libc::O_RDONLY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(io(&rel, "opening a source directory"))?;
            walk(sub, &rel, depth + 1, visit)?;
        } else if ft.is_file() {
            let f = openat2(
                listing.as_fd(),
                &name,
                libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
                0,
            )
            .map_err(io(&rel, "opening a source file"))?;
            visit(Found::File(
                &rel,
                fs::File::from(f),
                meta.permissions().mode() & 0o111 != 0,
            ))?;
        }
    }
    Ok(())
}

impl WorkDir {
    /// The work dir's root, opened for [`walk`].
    fn open_root(&self, what: &'static str) -> Result<OwnedFd, WorkDirError> {
        openat2(self.root(), ".", libc::O_DIRECTORY | libc::O_RDONLY, 0).map_err(|source| WorkDirError::Io {
            path: ".".into(),
            what,
            source,
        })
    }

    /// Copies the regular files and directories of `src` into this work dir, owned by this run's uid.
    ///
    /// Walks `src` through descriptors with no-follow opens: symlinks, FIFOs,
    /// sockets and devices a program planted there are skipped, never followed.
    pub fn copy_from(&self, src: &WorkDir) -> Result<(), WorkDirError> {
        walk(
            src.open_root("opening the source dir")?,
            "",
            0,
            &mut |found| match found {
                Found::Dir(rel) => {
                    let io = |what| {
                        let path = rel.to_owned();
                        move |source| WorkDirError::Io { path, what, source }
                    };
                    let c = CString::new(rel).map_err(|_| WorkDirError::InvalidPath(rel.to_owned()))?;
                    mount::mkdirat(self.root(), &c, 0o755).map_err(io("creating a directory"))?;
                    let d = openat2(self.root(), rel, libc::O_DIRECTORY | libc::O_RDONLY, 0)
                        .map_err(io("opening a directory"))?;
                    let _ = std::os::unix::fs::fchown(&d, Some(self.uid), Some(self.gid));
                    Ok(())
                }
                Found::File(rel, mut f, executable) => {
                    let mut content = Vec::new();
                    f.read_to_end(&mut content).map_err(|source| WorkDirError::Io {
                        path: rel.to_owned(),
                        what: "reading",
                        source,
                    })?;
                    self.write_file(rel, &content, executable)
                }
            },
        )
    }

    /// Copies the regular files and directories of this work dir to `dest`, a host directory
    /// that must not exist yet, owned by the executor and readable by all (directories 0755,
    /// files 0644, or 0755 when executable): artifacts a build left that every run will read.
    /// The walk is [`WorkDir::copy_from`]'s: nothing the build left is followed.
    pub fn export_to(&self, dest: &std::path::Path) -> Result<(), WorkDirError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let io = io_at;
        let mkdir = |rel: &str| {
            let dir = dest.join(rel);
            fs::DirBuilder::new()
                .mode(0o755)
                .create(&dir)
                .map_err(io(rel, "creating an export directory"))?;
            // The umask may have taken bits away; every run's uid must read it.
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).map_err(io(rel, "chmod"))
        };
        mkdir("")?;
        walk(
            self.open_root("opening the work dir")?,
            "",
            0,
            &mut |found| match found {
                Found::Dir(rel) => mkdir(rel),
                Found::File(rel, mut f, executable) => {
                    let mode = if executable { 0o755 } else { 0o644 };
                    let mut out = fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(mode)
                        .open(dest.join(rel))
                        .map_err(io(rel, "creating an exported file"))?;
                    std::io::copy(&mut f, &mut out).map_err(io(rel, "exporting"))?;
                    out.set_permissions(fs::Permissions::from_mode(mode))
                        .map_err(io(rel, "chmod"))
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a runtime's only worker, a task blocked in clean-up still lets the worker's other
    /// tasks run (it waits here for one it spawned: inline, it would wait the 10 s out);
    /// on a current-thread runtime, a blocking-pool thread and no runtime it just runs.
    #[test]
    fn blocking_clean_up_leaves_the_workers_other_tasks_running() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let served = rt.block_on(async {
            tokio::spawn(async {
                let (tx, rx) = std::sync::mpsc::channel();
                tokio::spawn(async move {
                    let _ = tx.send(());
                });
                off_the_runtime(|| rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok())
            })
            .await
            .expect("join")
        });
        assert!(served, "the worker's other task did not run while one blocked");
        assert_eq!(
            rt.block_on(async {
                tokio::task::spawn_blocking(|| off_the_runtime(|| 2))
                    .await
                    .expect("join")
            }),
            2
        );
        let current = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
        assert_eq!(current.block_on(async { off_the_runtime(|| 3) }), 3);
        assert_eq!(off_the_runtime(|| 4), 4);
    }

    /// Runs `f` on a thread and waits at most 20 s: an open that blocks fails the test
    /// instead of hanging it.
    fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{what}: blocked on a planted entry"))
    }

    // Plants through the host path of a directory work dir (a socket needs one); as root.
    #[test]
    fn writes_and_reads_refuse_fifos_sockets_and_links_without_blocking() {
        let host = tempfile::tempdir().unwrap();
        let root = host.path().join("w");
        let w = std::sync::Arc::new(WorkDir::directory(root.clone(), 0, 0).unwrap());
        nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        nix::unistd::mkfifo(&root.join("read-fifo"), nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(root.join("sock")).unwrap();
        std::os::unix::fs::symlink(host.path().join("outside"), root.join("link")).unwrap();
        fs::write(host.path().join("target"), b"host").unwrap();
        std::os::unix::fs::symlink(host.path().join("target"), root.join("filelink")).unwrap();
        // A FIFO someone reads: the open alone would succeed.
        use std::os::unix::fs::OpenOptionsExt;
        let _reader = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(root.join("read-fifo"))
            .unwrap();
        for planted in ["fifo", "read-fifo", "sock", "link", "filelink"] {
            let ww = w.clone();
            let wrote = bounded(planted, move || ww.write_file(planted, b"data", false));
            assert!(
                matches!(&wrote, Err(WorkDirError::NotRegular { path }) if path == planted),
                "write_file onto {planted}: {wrote:?}"
            );
            assert!(
                wrote.unwrap_err().to_string().contains(planted),
                "the error names the path"
            );
            let ww = w.clone();
            let read = bounded(planted, move || ww.read_file(planted, 100));
            assert!(
                matches!(read, Err(FetchError::NotRegular)),
                "read_file of {planted}: {read:?}"
            );
            // The executor's own files replace what was planted instead.
            let ww = w.clone();
            bounded(planted, move || ww.replace_file(planted, b"mine", false)).unwrap();
            assert_eq!(w.read_file(planted, 100).unwrap(), b"mine", "{planted} replaced");
        }
        assert_eq!(
            fs::read(host.path().join("target")).unwrap(),
            b"host",
            "never written through"
        );
        assert!(!host.path().join("outside").exists());
        // A directory in the way is refused by both, and a regular file is written over.
        fs::create_dir(root.join("dir")).unwrap();
        assert!(w.write_file("dir", b"x", false).is_err());
        assert!(matches!(
            w.replace_file("dir", b"x", false),
            Err(WorkDirError::NotRegular { .. })
        ));
        w.write_file("f", b"longer content", false).unwrap();
        w.write_file("f", b"short", false).unwrap();
        assert_eq!(w.read_file("f", 100).unwrap(), b"short");
        w.replace_file("d/g", b"new", true).unwrap();
        assert_eq!(w.read_file("d/g", 100).unwrap(), b"new");
        let left: Vec<_> = fs::read_dir(root.join("d"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left behind: {left:?}");
    }

    fn at(w: &WorkDir, rel: &str) -> CString {
        let _ = w;
        CString::new(rel).unwrap()
    }

    // Creates tmpfs mounts: needs root, as the executor does.
    #[test]
    fn copy_from_copies_files_and_dirs_and_never_follows_links() {
        let src = WorkDir::create(1 << 20, 0, 0).unwrap();
        let dst = WorkDir::create(1 << 20, 0, 0).unwrap();
        src.write_file("a.txt", b"alpha", false).unwrap();
        src.write_file("d/e/bin", b"#!/bin/sh\n", true).unwrap();
        let m = src.root().as_raw_fd();
        // SAFETY: symlinkat/mkfifoat relative to our mount fd with valid C strings.
        unsafe {
            assert_eq!(
                libc::symlinkat(c"/etc/passwd".as_ptr(), m, at(&src, "link").as_ptr()),
                0
            );
            assert_eq!(libc::symlinkat(c"/etc".as_ptr(), m, at(&src, "d/dirlink").as_ptr()), 0);
            assert_eq!(libc::mkfifoat(m, at(&src, "fifo").as_ptr(), 0o644), 0);
        }

        dst.copy_from(&src).unwrap();
        assert_eq!(dst.read_file("a.txt", 100).unwrap(), b"alpha");
        assert_eq!(dst.read_file("d/e/bin", 100).unwrap(), b"#!/bin/sh\n");
        let f = openat2(dst.root(), "d/e/bin", libc::O_RDONLY, 0).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::File::from(f).metadata().unwrap().permissions().mode();
        assert_ne!(mode & 0o111, 0, "executable bit kept");
        for gone in ["link", "d/dirlink", "fifo"] {
            assert_eq!(dst.read_file(gone, 100), Err(FetchError::NotFound), "{gone} copied");
        }

        let host = tempfile::tempdir().unwrap();
        let out = host.path().join("export");
        src.export_to(&out).unwrap();
        assert_eq!(fs::read(out.join("a.txt")).unwrap(), b"alpha");
        let mode = |p: &str| fs::metadata(out.join(p)).unwrap().permissions().mode() & 0o7777;
        assert_eq!((mode("a.txt"), mode("d/e/bin"), mode("d")), (0o644, 0o755, 0o755));
        for gone in ["link", "d/dirlink", "fifo"] {
            assert!(fs::symlink_metadata(out.join(gone)).is_err(), "{gone} exported");
        }
        assert!(src.export_to(&out).is_err(), "an existing export is not written over");
    }
}
