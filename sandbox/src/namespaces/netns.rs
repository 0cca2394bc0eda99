//! Network namespaces made ahead of time, off the runs' critical path.
//!
//! Every run gets a network namespace of its own with only loopback in it.
//! Making one (its loopback device, sysctl tables, per-protocol state) cost
//! about 1 ms of a trivial run's 2.6 ms here, so a factory thread keeps a
//! few fresh ones ready, loopback already up, at the lowest priority so that
//! making the next one never delays a run that wants the CPU. Making and
//! tearing them down is still about a quarter of the executor's CPU per
//! trivial run (docs/performance.md, "Per-run fixed cost"). A namespace is handed to
//! exactly one run and never reused: once that run's processes are gone and
//! its descriptor is closed, the kernel tears it down. When none is ready
//! (a burst drained the queue, or the factory could not start) the run makes
//! its own with `CLONE_NEWNET`, as before.

use std::os::fd::OwnedFd;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// Fresh network namespaces, each with loopback up, for one run each.
#[derive(Debug)]
pub(crate) struct NetnsPool {
    ready: Mutex<Receiver<OwnedFd>>,
}

impl NetnsPool {
    /// Starts the factory thread, which keeps up to `depth` namespaces ready.
    pub fn start(depth: usize) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(depth.max(1));
        std::thread::Builder::new()
            .name("sandpool-netns".into())
            .spawn(move || factory(tx))?;
        Ok(NetnsPool { ready: Mutex::new(rx) })
    }

    /// A fresh namespace, or None when none is ready (the caller makes its own).
    pub fn take(&self) -> Option<OwnedFd> {
        self.ready.lock().ok()?.try_recv().ok()
    }
}

/// Makes namespaces until the pool is dropped. Runs on its own thread, which
/// enters each namespace it makes and so never does anything else.
fn factory(tx: SyncSender<OwnedFd>) {
    // A run taking a namespace wakes this thread to make the next one, at the moment the
    // run's own init wants a CPU: at nice 0 the init waited behind the 0.4 ms of making it
    // (a lone caller's trivial run: p50 1.8-2.3 ms, 1.6-1.7 ms at nice 19). When runs keep
    // every CPU busy this thread falls behind and they make their own, as they would anyway.
    if let Err(e) = crate::sys::process::set_thread_nice(19) {
        tracing::debug!(error = %e, "network namespaces are made at the runs' priority");
    }
    loop {
        let fd = match make() {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(error = %e, "cannot prepare network namespaces; runs make their own");
                return;
            }
        };
        // Blocks while the pool is full; fails once the sandbox is gone.
        if tx.send(fd).is_err() {
            return;
        }
    }
}

/// Moves this thread into a new network namespace, brings loopback up, and
/// returns a descriptor for the namespace.
fn make() -> std::io::Result<OwnedFd> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)?;
    let ns = std::fs::File::open("/proc/thread-self/ns/net")?;
    crate::sys::raw::loopback_up().map_err(std::io::Error::from_raw_os_error)?;
    Ok(ns.into())
}
