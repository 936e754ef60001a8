//! Giving freed memory back to the system.
//!
//! The binary's global allocator is mimalloc (src/main.rs). It keeps freed pages for reuse and
//! returns them to the system (`MADV_DONTNEED`) only `purge_delay` (1 s) after they were freed,
//! and only when some thread calls into it past that moment. A process that goes idle after a
//! burst therefore keeps the burst's memory: a recording server that took 47 MB under load
//! still held it when the load ended. Background threads that wake anyway call [`release`] so
//! that what was freed is returned within about a second: the snapshot writer, and the load
//! sampler of `clef serve` once a second (200 clients dropped by the write timeout left 14 MB of
//! answer buffers resident without it, 3 MB with it). Buffers that only a large request needs
//! come straight from the system instead (`server::buffer`) and go back when it is answered.
//!
//! Arena purges are process-wide: a call from one thread also returns whole pages freed by
//! other threads. When mimalloc is not the global allocator (the library's tests), mimalloc
//! has nothing to release and the call returns at once.

/// Asks the allocator to return memory freed more than `purge_delay` ago (`force`: all freed
/// memory, now). Cheap when there is nothing to return; never blocks other threads' allocations.
pub fn release(force: bool) {
    clef_sys::release_freed_memory(force);
}
