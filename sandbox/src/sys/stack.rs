//! Memory for the stack of a child made with `clone`: the namespaces mode's
//! inits, spawners and helpers, and the start-up probe's.

/// Memory for a child's stack, with a guard page below it.
#[derive(Debug)]
pub(crate) struct Stack {
    base: *mut libc::c_void,
    len: usize,
}

impl Stack {
    /// Populated up front, so its pages are charged to the executor's cgroup:
    /// an init or a spawner touching a fresh page inside a slot's cgroup that
    /// is out of memory would fault forever, as the OOM killer never picks
    /// them (they are in vfork, see the spawner).
    ///
    /// Stacks of ended runs are kept (up to [`SPARE_STACKS`]) and handed out
    /// again: mapping and populating one costs every run otherwise.
    pub fn new(len: usize) -> std::io::Result<Self> {
        let page = 4096;
        if let Some(spare) = take_spare(len + page) {
            return Ok(spare);
        }
        // SAFETY: anonymous private mapping; checked for failure below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the lowest page of our own mapping becomes the guard.
        unsafe { libc::mprotect(base, page, libc::PROT_NONE) };
        Ok(Stack { base, len: len + page })
    }

    /// Highest address, where a downward-growing stack starts (16-byte aligned).
    pub fn top(&self) -> *mut libc::c_void {
        ((self.base as usize + self.len) & !15) as *mut libc::c_void
    }
}

// SAFETY: the mapping is owned exclusively by this value.
unsafe impl Send for Stack {}
// SAFETY: shared references only read the base address and length.
unsafe impl Sync for Stack {}

/// Most stacks kept for reuse (each is populated memory of the executor's).
pub(crate) const SPARE_STACKS: usize = 64;

/// Stacks whose child is gone (reaped, or exec'd into memory of its own).
static SPARES: std::sync::Mutex<Vec<Stack>> = std::sync::Mutex::new(Vec::new());

fn take_spare(len: usize) -> Option<Stack> {
    let mut spares = SPARES.lock().unwrap_or_else(|p| p.into_inner());
    let i = spares.iter().position(|s| s.len == len)?;
    Some(spares.swap_remove(i))
}

impl Drop for Stack {
    fn drop(&mut self) {
        // Dropped only once no child can run on it: back to the spares.
        let mut spares = SPARES.lock().unwrap_or_else(|p| p.into_inner());
        if spares.len() < SPARE_STACKS && self.len != 0 {
            spares.push(Stack {
                base: std::mem::replace(&mut self.base, std::ptr::null_mut()),
                len: std::mem::take(&mut self.len),
            });
            return;
        }
        drop(spares);
        if self.len != 0 {
            // SAFETY: unmaps exactly the mapping created in `new`.
            unsafe { libc::munmap(self.base, self.len) };
        }
    }
}
