//! Session seats: the sandbox identities beside the run slots (a uid and a cgroup each) that
//! sessions hold from create to end, their CPU weight, and the wait until a seat's processes
//! are gone before it is handed on.

use super::SessionManager;
use super::procs;
use super::record::Session;
use crate::engine::Engine;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a closing session waits for the host to see its processes gone.
pub(super) const KILL_WAIT: Duration = Duration::from_secs(10);

/// The executor's free session seats (sandbox identities `slots..slots + seats`).
#[derive(Debug)]
pub(super) struct Seats(pub(super) Mutex<BTreeSet<usize>>, pub(super) Arc<Engine>);

/// A seat a session holds; back to the free ones when dropped (never while its processes live:
/// see [`SessionManager::end_all`]).
#[derive(Debug)]
pub(super) struct SeatGuard {
    pub(super) seats: Arc<Seats>,
    pub(super) index: usize,
}

impl Seats {
    /// The lowest free seat: the fewest distinct cgroups are ever made.
    pub(super) fn take(self: &Arc<Self>) -> Option<SeatGuard> {
        let index = self.0.lock().ok()?.pop_first()?;
        Some(SeatGuard {
            seats: self.clone(),
            index,
        })
    }
}

impl Drop for SeatGuard {
    fn drop(&mut self) {
        // Its processes are gone and its /work dropped: its share of the sessions' memory
        // ceiling is free for the others (a bookkeeping change, no cgroup is written).
        self.seats
            .1
            .sandbox()
            .seat_share(self.index, crate::sandbox::SeatShare::Release);
        if let Ok(mut free) = self.seats.0.lock() {
            free.insert(self.index);
        }
    }
}

/// A seat's CPU weight for a session at `priority`, in cgroup v2 `cpu.weight` units where
/// every slot has 100: the priorities' weights (16 : 4 : 1), normal as a slot.
pub fn seat_cpu_weight(priority: crate::tenants::Priority) -> u32 {
    u32::try_from(priority.weight() * 100 / crate::tenants::Priority::Normal.weight()).unwrap_or(100)
}

impl SessionManager {
    /// Waits until the host sees none of `s`'s processes: sessions exist only
    /// in namespaces mode (see `create`), where each seat has a uid of its own.
    pub(super) async fn wait_gone(&self, s: &Session) -> bool {
        let seat = [(s.seat, s.uid(self.policy().uid_base))];
        procs::wait_gone(&self.engine, &seat, KILL_WAIT).await.is_empty()
    }
}
