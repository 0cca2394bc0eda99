//! The thread session seats' inits are cloned from.
//!
//! A slot's init dies with the executor: it sets `PR_SET_PDEATHSIG`, which follows the
//! thread that cloned it, and that is the thread that waits for the slot's spawner for
//! good. A seat has no spawner (see the module above), and the runtime's threads may retire
//! while a session lasts (blocking-pool threads do), which would kill it with them. So
//! seats' inits are cloned from this thread, which lives as long as the sandbox: a killed
//! executor takes its sessions' inits, and so their pid namespaces, with it.

use std::sync::Mutex;
use std::sync::mpsc;

/// Work for the cloning thread: a closure that clones an init and hands it on.
type Job = Box<dyn FnOnce() + Send>;

#[derive(Debug)]
pub(crate) struct SeatCloner {
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl SeatCloner {
    /// Starts the thread; it ends when the cloner is dropped.
    pub fn start() -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("sandpool-seats".into())
            .spawn(move || queue.into_iter().for_each(|job| job()))?;
        Ok(SeatCloner { jobs: Mutex::new(jobs) })
    }

    /// Runs `job` on the cloning thread. It must only clone (and not block): every seat's
    /// start waits behind it.
    pub fn run(&self, job: Job) -> std::io::Result<()> {
        let jobs = self
            .jobs
            .lock()
            .map_err(|_| std::io::Error::other("the seat cloner's lock is poisoned"))?;
        jobs.send(job)
            .map_err(|_| std::io::Error::other("the seat cloner's thread is gone"))
    }
}
