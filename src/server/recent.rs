//! `GET /snapshots` (admin listener): the recent decisions in memory, newest first, filtered
//! (see [`crate::snapshot::recent`] for what a listing searches and matches).
//!
//! A listing of the whole window decompresses and reads every frame in it — tens of
//! milliseconds on a Pi — so it is not made on the worker thread that read the request, where
//! it would hold up every decision whose connection lives on that worker: one thread of its
//! own (`clef-snapshot-list`, started on the first listing, at a lower priority: nice
//! [`LISTING_NICE`]) makes the listings, one at a time, while the request's coroutine waits
//! parked. What the listings hold is bounded: each at most
//! [`LISTING_BYTES`] of snapshot lines, and all of them together, made or being sent, at most
//! [`LISTINGS_BYTES`]; a listing beyond that is refused (503 `snapshots_busy`) rather than
//! queued.

use crate::server::errors::{ErrorAnswer as _, ErrorCode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use super::App;
use crate::http1::{Request, Response};
use crate::snapshot::{Listing, RecentQuery, Recorder};

/// The most bytes of snapshot lines one listing holds; beyond it the oldest matching lines are
/// left out and the listing says `truncated`.
pub const LISTING_BYTES: usize = 2 << 20;
/// The most bytes all listings being made or sent may hold together: room for this many
/// divided by [`LISTING_BYTES`] (8) at once.
pub const LISTINGS_BYTES: usize = 16 << 20;
/// The listing thread's nice value: while the workers are busy deciding, they get the CPU and
/// the listing waits; on an idle box the listing runs at full speed.
pub const LISTING_NICE: i32 = 10;

/// Bytes reserved by the listings being made or sent.
static RESERVED: AtomicUsize = AtomicUsize::new(0);

/// [`LISTING_BYTES`] of [`LISTINGS_BYTES`], held until dropped (once the answer is sent).
struct Reservation;

impl Reservation {
    fn take() -> Option<Reservation> {
        RESERVED
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held + LISTING_BYTES <= LISTINGS_BYTES).then_some(held + LISTING_BYTES)
            })
            .ok()
            .map(|_| Reservation)
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        RESERVED.fetch_sub(LISTING_BYTES, Ordering::AcqRel);
    }
}

/// One listing to make, and where its answer goes (a may channel: waiting parks the
/// coroutine, not its worker thread).
struct Job {
    recorder: Recorder,
    query: RecentQuery,
    reply: may::sync::mpsc::Sender<Listing>,
}

/// The listing thread's queue: `None` when the thread could not be started (listings are then
/// made where they are asked).
fn lister() -> Option<&'static crossbeam::channel::Sender<Job>> {
    static LISTER: OnceLock<Option<crossbeam::channel::Sender<Job>>> = OnceLock::new();
    LISTER
        .get_or_init(|| {
            // never full: a job is sent only with a reservation, and there are at most this many
            let (send, jobs) = crossbeam::channel::bounded::<Job>(LISTINGS_BYTES / LISTING_BYTES);
            let started = std::thread::Builder::new().name("clef-snapshot-list".into()).spawn(move || {
                if let Err(e) = clef_sys::set_thread_nice(LISTING_NICE) {
                    log::debug!("snapshot listings run at the workers' priority: cannot lower it ({e})");
                }
                for job in jobs {
                    let _ = job.reply.send(make(&job.recorder, &job.query));
                }
            });
            match started {
                Ok(_) => Some(send),
                Err(e) => {
                    log::warn!("cannot start the snapshot listing thread ({e}); listings are made on the workers");
                    None
                }
            }
        })
        .as_ref()
}

fn make(recorder: &Recorder, query: &RecentQuery) -> Listing {
    let started = Instant::now();
    let listing = recorder.recent(query, LISTING_BYTES);
    log::debug!(
        "GET /snapshots: {} listed of {} read ({} in memory) in {:.1} ms",
        listing.snapshots.len(),
        listing.scanned,
        listing.window.snapshots,
        started.elapsed().as_secs_f64() * 1e3
    );
    listing
}

/// `GET /snapshots?table=&rule=&outcome=&action=&since=&before=&limit=`.
pub(super) fn list<'a>(app: &'a App, req: &Request<'_>, rsp: &mut Response<'a>) {
    let query = match RecentQuery::parse(req.query, SystemTime::now()) {
        Ok(q) => q,
        Err(e) => return rsp.fail(ErrorCode::InvalidQuery, &e.to_string()),
    };
    let Some(recorder) = &app.stages.recorder else {
        return rsp.fail(
            ErrorCode::SnapshotsOff,
            "snapshots are off (snapshots.enabled: false): no decision is recorded, so there is none to list",
        );
    };
    let Some(reservation) = Reservation::take() else {
        return rsp.fail(ErrorCode::SnapshotsBusy, "other snapshot listings being made or sent hold all the memory listings may take; retry when they are done",
        );
    };
    let listing = match lister() {
        Some(jobs) => {
            let (reply, answer) = may::sync::mpsc::channel();
            let job = Job { recorder: recorder.clone(), query: query.clone(), reply };
            match jobs.try_send(job).ok().and_then(|()| answer.recv().ok()) {
                Some(listing) => listing,
                // the thread is gone (it never is, short of a panic): made here then
                None => make(recorder, &query),
            }
        }
        None => make(recorder, &query),
    };
    rsp.stream(move |_, out| {
        let _reservation = reservation;
        // an error is the client gone: nothing more to say to it
        let _ = listing.write_json(out);
    });
}
