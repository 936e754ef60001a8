//! A connection's read buffer, and the budget all of them share beyond a small base.
//!
//! Every connection may read into [`BASE`] bytes of its own. A request larger than that (a body,
//! a long head) needs more, taken from one [`RequestMemory`] that all connections share
//! (`server.request_memory_bytes`), so that thousands of clients that each send part of a large
//! request hold at most that budget together, not thousands of bodies (SPEC §6, memory per
//! connection). The budget is touched only by requests larger than the base: the decision path
//! of an ordinary request writes no shared atomic.
//!
//! Memory beyond the base comes straight from the system (an anonymous mapping) and goes back
//! to it the moment the request is answered: the allocator keeps freed memory for reuse and
//! returns it only when some thread calls into it, which idle workers never do.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

use memmap2::{MmapMut, MmapOptions};

/// The bytes every connection may read into without taking from the shared budget.
pub const BASE: usize = 8192;

/// The memory all connections together may hold for requests larger than [`BASE`].
#[derive(Debug)]
pub struct RequestMemory {
    limit: usize,
    held: AtomicUsize,
}

impl RequestMemory {
    /// A budget of `limit` bytes, none of it held.
    pub fn new(limit: usize) -> RequestMemory {
        RequestMemory { limit, held: AtomicUsize::new(0) }
    }

    /// The budget, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now by requests larger than the base (`clef_request_memory_bytes`).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes if the budget has them.
    fn take(&self, n: usize) -> bool {
        if n == 0 {
            return true;
        }
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(n).filter(|&after| after <= self.limit)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The budget has no room for a request this large now (answered 503 `overloaded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exhausted;

/// Bytes of a [`RequestMemory`] held by one user, given back when dropped.
#[derive(Debug)]
pub struct Held<'m> {
    memory: &'m RequestMemory,
    bytes: usize,
}

impl<'m> Held<'m> {
    /// Nothing held yet.
    pub fn new(memory: &'m RequestMemory) -> Held<'m> {
        Held { memory, bytes: 0 }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `bytes` in all: takes what is missing (`Err`, nothing changed, when the budget
    /// does not have it) or gives back what is beyond.
    pub fn set(&mut self, bytes: usize) -> Result<(), Exhausted> {
        if bytes > self.bytes {
            if !self.memory.take(bytes - self.bytes) {
                return Err(Exhausted);
            }
        } else {
            self.memory.give_back(self.bytes - bytes);
        }
        self.bytes = bytes;
        Ok(())
    }

    /// What the budget allows in all.
    pub fn limit(&self) -> usize {
        self.memory.limit
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.memory.give_back(self.bytes);
    }
}

enum Storage {
    Heap(Vec<u8>),
    Mapped(MmapMut),
}

/// A read buffer: its whole length is usable (bytes not yet read are zero). Up to [`BASE`]
/// bytes it lives on the heap; beyond, it is a mapping that holds its size in the shared
/// budget until it shrinks or is dropped.
pub struct InputBuffer<'m> {
    storage: Storage,
    /// what the storage beyond the base holds of the budget
    held: Held<'m>,
}

impl<'m> InputBuffer<'m> {
    /// An empty buffer (no memory) drawing on `memory` when it grows beyond the base.
    pub fn new(memory: &'m RequestMemory) -> InputBuffer<'m> {
        InputBuffer { storage: Storage::Heap(Vec::new()), held: Held::new(memory) }
    }

    /// Replaces the buffer with one of `size` bytes whose first `keep` bytes are this one's.
    /// `Err` (and nothing changed) when the budget cannot hold `size` or the system has no
    /// memory for it.
    pub fn resize(&mut self, size: usize, keep: usize) -> Result<(), Exhausted> {
        let before = self.held.bytes();
        let need = size.saturating_sub(BASE);
        if need > before {
            self.held.set(need)?;
        }
        let mut storage = if size <= BASE {
            Storage::Heap(vec![0; size])
        } else {
            match MmapOptions::new().len(size).map_anon() {
                Ok(map) => Storage::Mapped(map),
                Err(_) => {
                    let _ = self.held.set(before);
                    return Err(Exhausted);
                }
            }
        };
        let keep = keep.min(size).min(self.len());
        if let (Some(to), Some(from)) = (bytes_mut(&mut storage).get_mut(..keep), self.get(..keep)) {
            to.copy_from_slice(from);
        }
        self.storage = storage;
        // giving back cannot fail
        let _ = self.held.set(need);
        Ok(())
    }

    /// Frees the buffer (an idle connection's).
    pub fn free(&mut self) {
        self.storage = Storage::Heap(Vec::new());
        let _ = self.held.set(0);
    }
}

fn bytes_mut(storage: &mut Storage) -> &mut [u8] {
    match storage {
        Storage::Heap(v) => v,
        Storage::Mapped(m) => m,
    }
}

impl Deref for InputBuffer<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.storage {
            Storage::Heap(v) => v,
            Storage::Mapped(m) => m,
        }
    }
}

impl DerefMut for InputBuffer<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        bytes_mut(&mut self.storage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growing_beyond_the_base_takes_from_the_budget_and_gives_it_back() {
        let memory = RequestMemory::new(3 * BASE);
        let mut a = InputBuffer::new(&memory);
        a.resize(BASE, 0).unwrap();
        assert_eq!(memory.held(), 0, "the base is free");
        a[..5].copy_from_slice(b"hello");
        a.resize(3 * BASE, 5).unwrap();
        assert_eq!((a.len(), &a[..5], memory.held()), (3 * BASE, &b"hello"[..], 2 * BASE));
        let mut b = InputBuffer::new(&memory);
        assert_eq!(b.resize(3 * BASE, 0), Err(Exhausted), "only one base is left");
        assert_eq!(b.len(), 0);
        b.resize(2 * BASE, 0).unwrap();
        assert_eq!(memory.held(), 3 * BASE);
        // shrinking keeps the bytes asked for and gives the rest back
        a.resize(BASE, 5).unwrap();
        assert_eq!((&a[..5], memory.held()), (&b"hello"[..], BASE));
        drop(b);
        assert_eq!(memory.held(), 0);
        a.resize(2 * BASE, 0).unwrap();
        a.free();
        assert_eq!((a.len(), memory.held()), (0, 0));
    }
}
