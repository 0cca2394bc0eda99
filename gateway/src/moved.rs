//! Sessions that answer from another executor than their id names: an executor that drained
//! paused them into the shared store, and another resumed them (docs/sessions.md, "Surviving
//! the pod"). Learned from the `x-sandpool-executor` header of the executor's answers;
//! bounded, the oldest forgotten first (a forgotten one is found again the same way).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// The header an executor names itself in on every answer.
pub const EXECUTOR_HEADER: &str = "x-sandpool-executor";

/// Sessions the gateway remembers as moved unless told otherwise.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// session id → the executor (backend name) that now holds it.
#[derive(Debug)]
pub struct Moved {
    cap: usize,
    inner: Mutex<(HashMap<String, String>, VecDeque<String>)>,
}

impl Default for Moved {
    fn default() -> Self {
        Moved::new(DEFAULT_CAPACITY)
    }
}

impl Moved {
    pub fn new(cap: usize) -> Self {
        Moved {
            cap: cap.max(1),
            inner: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// Where session `id` answered last, when not where its id says.
    pub fn get(&self, id: &str) -> Option<String> {
        self.inner.lock().ok()?.0.get(id).cloned()
    }

    /// Records that session `id` (whose id names `named`) answered from `by`.
    pub fn answered(&self, id: &str, named: &str, by: &str) {
        let Ok(mut g) = self.inner.lock() else { return };
        let (map, order) = &mut *g;
        if by == named {
            if map.remove(id).is_some() {
                order.retain(|k| k != id);
            }
            return;
        }
        if map.insert(id.to_owned(), by.to_owned()).is_none() {
            order.push_back(id.to_owned());
            while map.len() > self.cap {
                match order.pop_front() {
                    Some(old) => {
                        map.remove(&old);
                    }
                    None => break,
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map(|g| g.0.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_forgets_and_stays_bounded() {
        let m = Moved::new(2);
        m.answered("s1", "a", "b");
        assert_eq!(m.get("s1").as_deref(), Some("b"));
        // Back where its id says: forgotten.
        m.answered("s1", "a", "a");
        assert_eq!(m.get("s1"), None);
        m.answered("s1", "a", "b");
        m.answered("s2", "a", "c");
        m.answered("s3", "a", "c");
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("s1"), None, "the oldest goes first");
        assert_eq!(m.get("s3").as_deref(), Some("c"));
    }
}
