//! Checks answered together. A `POST /v1/check` that needs no sync queues
//! its documents; the request that finds no one answering the queue answers
//! it, and while it does, the checks that arrive meanwhile queue up and are
//! answered together in the next round: one `Index::insert_if_new_many` call
//! per run of requests at one distance, in the order they queued, so one
//! writer lock and one WAL append serve many requests, and the requests do
//! not wait on each other for the lock (docs/SERVER.md, "Threads").
//!
//! Each request's documents stay together and in order, and the library
//! answers a batch exactly as the same checks one after the other, so the
//! answers are those of the requests made one by one in queue order.

use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;
use simhashdb::format::wal::MAX_FRAME_PAYLOAD;
use simhashdb::{Checked, VerifiedMatch};
use tokio::sync::oneshot;

use super::Server;
use super::error::ApiError;

/// Per document: inserted, or the matches that made it a duplicate.
pub type Answers = Vec<Result<(), Vec<VerifiedMatch>>>;

/// A document to check: id, a text's values or a fingerprint, name.
pub type Doc = (u64, Checked, Option<String>);

struct Job {
    k: u32,
    docs: Vec<Doc>,
    reply: oneshot::Sender<Result<Answers, ApiError>>,
}

#[derive(Default)]
struct Queue {
    /// Whether a request or a task is answering the queue.
    answering: bool,
    jobs: Vec<Job>,
    /// Rounds in a row that held one job only, counted from [`ALONE`]
    /// again after [`ALONE`] + [`PROBE`] ([`Queue::waits_for_company`]).
    alone: u32,
}

/// Rounds of one job in a row after which a check no longer yields
/// before answering its round (but for the probes).
const ALONE: u32 = 4;

/// A check that found no company for this many rounds yields once anyway,
/// to learn whether checks now arrive together again.
const PROBE: u32 = 16;

const ALONE_AND_PROBE: u32 = ALONE + PROBE;

impl Queue {
    /// Whether the check that takes the queue yields before answering
    /// its round, so that the checks of the connections ready with it
    /// join the round: not after more than [`ALONE`] rounds in a row held
    /// one job each (one busy connection, say, where the yield only costs
    /// a poll of the sockets and a wake-up of the other worker: 0.6–0.7×
    /// the checks per second), but for one round in [`PROBE`].
    fn waits_for_company(&self) -> bool {
        self.alone <= ALONE
    }
}

/// The checks waiting to be answered: a queue per thread that serves
/// connections, so that a round holds the checks of its own thread's
/// connections, and answering them wakes no other thread; and one for the
/// checks of more than [`ON_THREAD_UP_TO`] documents, answered on the
/// blocking pool, so that they do not hold up the other connections of
/// their threads.
pub struct CheckQueue {
    queues: Vec<Mutex<Queue>>,
    large: Mutex<Queue>,
}

/// Documents a check may carry and still be answered on the thread that
/// serves its connection: a larger one is answered on the blocking pool
/// (with the other large ones queued meanwhile), since a thread serves many
/// connections (a check of 1,000 documents takes it about 2 ms), and a
/// hand-over costs it a few microseconds. 64 is the run of documents the
/// library searches together (`Index::query_batch`).
pub const ON_THREAD_UP_TO: usize = 64;

/// One of a [`CheckQueue`]'s queues.
#[derive(Clone, Copy)]
enum Which {
    /// That of the thread serving connections of this number.
    Thread(usize),
    /// That of the checks of more than [`ON_THREAD_UP_TO`] documents.
    Large,
}

impl Default for CheckQueue {
    fn default() -> CheckQueue {
        CheckQueue::per_thread(1)
    }
}

thread_local! {
    /// The number of the thread serving connections that this thread is
    /// ([`set_thread`]); 0 on any other.
    static THREAD: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Notes that this thread serves connections as thread `i`: its checks
/// queue in queue `i` of a [`CheckQueue`] (modulo their number).
pub fn set_thread(i: usize) {
    THREAD.with(|t| t.set(i));
}

impl CheckQueue {
    /// A queue for each of `threads` threads serving connections.
    pub fn per_thread(threads: usize) -> CheckQueue {
        CheckQueue {
            queues: (0..threads.max(1)).map(|_| Mutex::default()).collect(),
            large: Mutex::default(),
        }
    }

    /// The queue of this thread.
    fn this_thread(&self) -> Which {
        Which::Thread(THREAD.with(std::cell::Cell::get) % self.queues.len())
    }

    /// Queue `which`.
    fn lock_of(&self, which: Which) -> std::sync::MutexGuard<'_, Queue> {
        match which {
            Which::Thread(i) => &self.queues[i],
            Which::Large => &self.large,
        }
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
    }

    /// The queue of this thread, locked.
    #[cfg(test)]
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.lock_of(self.this_thread())
    }
}

/// Checks `docs` at distance `k`, together with the checks queued at the
/// same time.
pub async fn check(server: &Arc<Server>, k: u32, docs: Vec<Doc>) -> Result<Answers, ApiError> {
    let (reply, answer) = oneshot::channel();
    let which = if docs.len() > ON_THREAD_UP_TO {
        Which::Large
    } else {
        server.checks.this_thread()
    };
    let (answer_now, wait) = {
        let mut queue = server.checks.lock_of(which);
        queue.jobs.push(Job { k, docs, reply });
        let answer_now = !std::mem::replace(&mut queue.answering, true);
        (answer_now, answer_now && queue.waits_for_company())
    };
    if answer_now && matches!(which, Which::Large) {
        // Answered on the blocking pool, round after round, until the
        // queue is empty.
        let server = Arc::clone(server);
        drop(tokio::task::spawn_blocking(move || {
            while answer_round(&server, which) {}
        }));
    } else if answer_now {
        // The request that answers first lets the thread run its other
        // ready tasks (the requests that arrived with this one, which queue
        // behind it), then answers the round, this request's included, on
        // this thread (no await inside the round: it cannot be cancelled
        // halfway). Dropped while it waits, it answers the queue all the
        // same ([`Turn`]). The checks that queue during the round go to a
        // task of their own, so this request's answer does not wait for
        // them; rounds follow each other there without yielding to the
        // thread's other tasks: a yield between them cost a sixth of the
        // single-document checks at 16 connections (docs/BENCHMARKS.md,
        // "Fewer segments, checks answered together").
        if wait {
            let turn = Turn(server, which);
            // The yield wakes this task once the worker has run every task
            // ready now and polled for more (tokio defers it): a round then
            // holds the checks of a whole batch of ready connections, for
            // one writer lock and one WAL append (docs/BENCHMARKS.md,
            // "Checks of the connections ready together in one round").
            tokio::task::yield_now().await;
            std::mem::forget(turn);
        }
        if answer_round(server, which) {
            let server = Arc::clone(server);
            tokio::spawn(async move { while answer_round(&server, which) {} });
        }
    }
    answer.await.unwrap_or_else(|_| {
        Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the task answering the check failed",
        ))
    })
}

/// The queue's turn, held by a request that will answer it once its yield
/// returns: if the request is dropped meanwhile (its client went away), the
/// queue is answered here, its check included, as it would have been, so
/// the checks queued behind it are not left waiting. Forgotten once the
/// request answers it itself.
struct Turn<'a>(&'a Server, Which);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        while answer_round(self.0, self.1) {}
    }
}

/// If a round panics: lets the next check answer the queue, and answers
/// the checks queued meanwhile with an error, as the round's own are (their
/// senders drop), rather than leave them waiting for a check that may never
/// come. Forgotten when the round returns.
struct Answering<'a>(&'a CheckQueue, Which);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        let waiting = {
            let mut queue = self.0.lock_of(self.1);
            queue.answering = false;
            std::mem::take(&mut queue.jobs)
        };
        drop(waiting);
    }
}

/// Answers a round (every queued job); then returns whether jobs queued
/// meanwhile, leaving the queue to the next check if none did.
fn answer_round(server: &Server, which: Which) -> bool {
    let answering = Answering(&server.checks, which);
    round(server, which);
    std::mem::forget(answering);
    let mut queue = server.checks.lock_of(which);
    queue.answering = !queue.jobs.is_empty();
    queue.answering
}

/// A run's documents may take this many bytes of WAL records at most
/// (their estimate, [`record_bytes`]): a quarter of a WAL frame's limit, so
/// that requests joined together are never refused for it.
const RUN_BYTES: usize = MAX_FRAME_PAYLOAD / 4;

/// And this many documents at most: ten requests of the default limit.
const RUN_DOCUMENTS: usize = 100_000;

/// More than the bytes the WAL record of `doc` takes (docs/FORMAT.md,
/// "WAL file"): its fixed fields, a sketch and its name.
fn record_bytes(doc: &Doc) -> usize {
    80 + doc.2.as_ref().map_or(0, String::len)
}

/// Answers every queued job: one library call per run of jobs at one
/// distance, a run cut before it would exceed [`RUN_BYTES`] or
/// [`RUN_DOCUMENTS`] (a job alone over them is a run of its own, within
/// the server's request limits).
fn round(server: &Server, which: Which) {
    let jobs = {
        let mut queue = server.checks.lock_of(which);
        queue.alone = match queue.alone + 1 {
            _ if queue.jobs.len() > 1 => 0,
            ALONE_AND_PROBE => ALONE,
            alone => alone,
        };
        std::mem::take(&mut queue.jobs)
    };
    let mut jobs = jobs.into_iter().peekable();
    while let Some(first) = jobs.next() {
        let k = first.k;
        let size = |job: &Job| -> (usize, usize) {
            (job.docs.iter().map(record_bytes).sum(), job.docs.len())
        };
        let (mut bytes, mut documents) = size(&first);
        let mut run = vec![first];
        while let Some(job) = jobs.next_if(|job| {
            let (b, d) = size(job);
            job.k == k
                && bytes.saturating_add(b) <= RUN_BYTES
                && documents.saturating_add(d) <= RUN_DOCUMENTS
        }) {
            let (b, d) = size(&job);
            bytes += b;
            documents += d;
            run.push(job);
        }
        answer_run(server, k, run);
    }
}

fn answer_run(server: &Server, k: u32, mut run: Vec<Job>) {
    if let [_] = run[..]
        && let Some(job) = run.pop()
    {
        // One request (the usual round at a few connections): its
        // documents and its answers as they are.
        let answers = server
            .index
            .insert_if_new_many_verified(job.docs, k, 1)
            .map_err(ApiError::from_write);
        let _ = job.reply.send(answers);
        return;
    }
    let mut lens = Vec::with_capacity(run.len());
    let mut docs = Vec::new();
    let mut replies = Vec::with_capacity(run.len());
    for job in run {
        lens.push(job.docs.len());
        docs.extend(job.docs);
        replies.push(job.reply);
    }
    // Only the nearest accepted match is answered: the library keeps no
    // more.
    match server.index.insert_if_new_many_verified(docs, k, 1) {
        Ok(answers) => {
            let mut answers = answers.into_iter();
            for (reply, len) in replies.into_iter().zip(lens) {
                let _ = reply.send(Ok(answers.by_ref().take(len).collect()));
            }
        }
        Err(e) => {
            // Nothing was written; every request gets the error (a write
            // that failed poisons the index for all of them anyway).
            let error = ApiError::from_write(e);
            for reply in replies {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use simhashdb::{Durability, Index, Options};

    use super::super::{Hosts, Limits};
    use super::*;

    /// A server with `limits` over a new index in a temporary directory
    /// (kept while the directory lives), writes buffered.
    fn server_of(limits: Limits) -> (tempfile::TempDir, Arc<Server>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let index = Index::open(dir.path(), Options::new()).expect("open");
        let server =
            Server::new(index, Durability::Buffered, limits, Hosts::any(), None).expect("server");
        (dir, Arc::new(server))
    }

    /// Checks queued while another is being answered are answered together,
    /// a library call per run of one distance, exactly as the checks one by
    /// one in queue order: against a brute-force model of that order.
    #[test]
    fn queued_checks_are_answered_as_one_by_one_in_queue_order() {
        let (_dir, server) = server_of(Limits {
            max_body_bytes: 1 << 20,
            max_documents: 100,
            ..Limits::default()
        });
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        // Requests near each other: a few base fingerprints, bits flipped.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let bases: Vec<u64> = (0..3).map(|_| next()).collect();
        let mut requests: Vec<(u32, Vec<Doc>)> = Vec::new();
        let mut id = 0;
        for r in 0..24 {
            let k = if r % 5 == 3 { 1 } else { 3 };
            let docs = (0..1 + next() % 3)
                .map(|_| {
                    id += 1;
                    let mut fp = bases[(next() % 3) as usize];
                    for _ in 0..next() % 6 {
                        fp ^= 1 << (next() % 64);
                    }
                    (id, Checked::Fingerprint(fp), None)
                })
                .collect();
            requests.push((k, docs));
        }
        // Someone is answering: every request queues, in the order sent.
        server.checks.lock().answering = true;
        let mut waiting = Vec::new();
        for (n, (k, docs)) in requests.iter().cloned().enumerate() {
            let s = Arc::clone(&server);
            waiting.push(runtime.spawn(async move { check(&s, k, docs).await }));
            while server.checks.lock().jobs.len() < n + 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        round(&server, server.checks.this_thread());
        server.checks.lock().answering = false;
        let answers: Vec<Answers> = waiting
            .into_iter()
            .map(|w| runtime.block_on(w).expect("task").expect("answer"))
            .collect();

        let mut stored: Vec<(u64, u64)> = Vec::new();
        let (mut new, mut duplicate) = (0, 0);
        for ((k, docs), answer) in requests.iter().zip(&answers) {
            assert_eq!(answer.len(), docs.len());
            for (&(id, ref checked, _), got) in docs.iter().zip(answer) {
                let Checked::Fingerprint(fp) = *checked else {
                    unreachable!("fingerprints only")
                };
                let mut within: Vec<(u32, u64)> = stored
                    .iter()
                    .map(|&(other, ofp)| ((ofp ^ fp).count_ones(), other))
                    .filter(|&(d, _)| d <= *k)
                    .collect();
                within.sort_unstable();
                match got {
                    Ok(()) => {
                        assert!(within.is_empty(), "{id} is new, yet near {within:?}");
                        stored.push((id, fp));
                        new += 1;
                    }
                    Err(matches) => {
                        // The nearest only.
                        let found: Vec<(u32, u64)> =
                            matches.iter().map(|m| (m.doc.distance, m.doc.id)).collect();
                        assert_eq!(found, within[..1], "{id}");
                        duplicate += 1;
                    }
                }
            }
        }
        assert!(
            new > 2 && duplicate > 2,
            "{new} new, {duplicate} duplicates"
        );
        // What was stored is what the model stored.
        for &(id, fp) in &stored {
            assert_eq!(server.index.get(id).expect("get"), Some(fp));
        }
        assert_eq!(server.index.len().expect("len"), stored.len() as u64);
        // And nobody answers the queue now: the next check answers itself.
        let (k, docs) = (
            3,
            vec![(1000, Checked::Fingerprint(bases[0] ^ 0xf0f0), None)],
        );
        let answer = runtime.block_on(check(&server, k, docs)).expect("answer");
        assert_eq!(answer.len(), 1);
        assert!(!server.checks.lock().answering);
    }
    /// A request dropped while it waits to answer the queue (its client
    /// went away during the yield) answers it all the same: its own check
    /// is written first, and the check queued behind it is answered, not
    /// left waiting for a turn that never comes.
    #[test]
    fn a_check_dropped_before_its_round_still_answers_the_queue() {
        use std::future::Future;
        use std::task::Poll;

        let (_dir, server) = server_of(Limits::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let fp = 0x0123_4567_89ab_cdef_u64;
        let answers = runtime.block_on(async {
            let mut first = Box::pin(check(&server, 3, vec![(1, Checked::Fingerprint(fp), None)]));
            let mut second = Box::pin(check(
                &server,
                3,
                vec![(2, Checked::Fingerprint(fp ^ 0b101), None)],
            ));
            std::future::poll_fn(|cx| {
                // The first takes the queue and yields; the second queues
                // behind it.
                assert!(first.as_mut().poll(cx).is_pending());
                assert!(second.as_mut().poll(cx).is_pending());
                Poll::Ready(())
            })
            .await;
            assert!(server.checks.lock().answering);
            assert_eq!(server.checks.lock().jobs.len(), 2);
            drop(first);
            second.await.expect("answer")
        });
        // The dropped request's document was checked (new) and stored
        // first: the second is its duplicate, at distance 2.
        match &answers[..] {
            [Err(matches)] => {
                assert_eq!((matches[0].doc.id, matches[0].doc.distance), (1, 2));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(server.index.get(1).expect("get"), Some(fp));
        assert_eq!(server.index.get(2).expect("get"), None);
        let queue = server.checks.lock();
        assert!(!queue.answering && queue.jobs.is_empty());
    }

    /// The first check of a round yields to let others join it, but not
    /// after more than `ALONE` rounds in a row of one check each, but for
    /// one round in `PROBE`; a round of several checks turns the yield
    /// back on. Every check is answered either way.
    #[test]
    fn lone_checks_stop_yielding_but_for_a_probe_every_sixteenth_round() {
        use std::future::Future;
        use std::task::Poll;

        let (_dir, server) = server_of(Limits::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let fp = |i: u64| 0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(i + 1);
        // Whether check `i`'s first poll yielded; its answer (new).
        let check_alone = |i: u64| -> bool {
            runtime.block_on(async {
                let mut one = Box::pin(check(
                    &server,
                    3,
                    vec![(i, Checked::Fingerprint(fp(i)), None)],
                ));
                let first = std::future::poll_fn(|cx| Poll::Ready(one.as_mut().poll(cx))).await;
                let yielded = first.is_pending();
                let answers = match first {
                    Poll::Ready(answers) => answers,
                    Poll::Pending => one.await,
                };
                assert!(matches!(&answers.expect("answer")[..], [Ok(())]), "{i}");
                yielded
            })
        };
        let yielded: Vec<u64> = (0..40).filter(|&i| check_alone(i)).collect();
        let expected: Vec<u64> = (0..40u64)
            .filter(|&i| i <= u64::from(ALONE) || (i - u64::from(ALONE)) % u64::from(PROBE) == 0)
            .collect();
        assert_eq!(yielded, expected);
        assert_eq!(expected, [0, 1, 2, 3, 4, 20, 36]);
        // A round of two checks: the next check yields again.
        assert!(!check_alone(40));
        server.checks.lock().answering = true;
        let together: Vec<_> = (41..43)
            .map(|i| {
                let s = Arc::clone(&server);
                runtime.spawn(async move {
                    check(&s, 3, vec![(i, Checked::Fingerprint(fp(i)), None)]).await
                })
            })
            .collect();
        while server.checks.lock().jobs.len() < 2 {
            runtime.block_on(tokio::task::yield_now());
        }
        round(&server, server.checks.this_thread());
        server.checks.lock().answering = false;
        for t in together {
            assert!(runtime.block_on(t).expect("task").is_ok());
        }
        assert!(check_alone(43));
        assert_eq!(server.index.len().expect("len"), 44);
    }

    /// Requests within the server's limits whose documents together take
    /// more than a WAL frame may hold, queued at once: every one is
    /// answered, none is refused for what the others sent.
    #[test]
    fn requests_queued_together_past_a_wal_frame_are_each_answered() {
        use simhashdb::format::MAX_NAME_LEN;

        let (_dir, server) = server_of(Limits::default());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        // 18 requests of 256 documents named with 64 KiB each: 16 MiB, the
        // default body limit, each; 288 MiB in all, past a frame's 256.
        let (requests, per_request) = (18u64, 256u64);
        assert!((requests * per_request) as usize * MAX_NAME_LEN > MAX_FRAME_PAYLOAD);
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        // Requests of more than `ON_THREAD_UP_TO` documents: the queue of
        // the large checks.
        let large = Which::Large;
        server.checks.lock_of(large).answering = true;
        let mut waiting = Vec::new();
        for r in 0..requests {
            let docs: Vec<Doc> = (0..per_request)
                .map(|i| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let mut name = format!("{r}/{i}/");
                    name.extend(std::iter::repeat_n('x', MAX_NAME_LEN - name.len()));
                    (r * per_request + i, Checked::Fingerprint(state), Some(name))
                })
                .collect();
            let s = Arc::clone(&server);
            waiting.push(runtime.spawn(async move { check(&s, 3, docs).await }));
            while server.checks.lock_of(large).jobs.len() < r as usize + 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        round(&server, large);
        server.checks.lock_of(large).answering = false;
        for (r, w) in waiting.into_iter().enumerate() {
            let answer = runtime
                .block_on(w)
                .expect("task")
                .unwrap_or_else(|e| panic!("request {r} refused: {}", e.message()));
            assert_eq!(answer.len(), per_request as usize);
            assert!(answer.iter().all(Result::is_ok), "request {r}");
        }
        assert_eq!(server.index.len().expect("len"), requests * per_request);
    }

    /// A check of more than `ON_THREAD_UP_TO` documents queues apart and is
    /// answered on the blocking pool; one of as many, on the thread that
    /// serves its connection.
    #[test]
    fn checks_of_more_documents_than_a_thread_takes_queue_apart() {
        let (_dir, server) = server_of(Limits::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let docs = |n: u64, from: u64| -> Vec<Doc> {
            (from..from + n)
                .map(|id| {
                    let fp = id.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    (id, Checked::Fingerprint(fp), None)
                })
                .collect()
        };
        let at_most = ON_THREAD_UP_TO as u64;
        // Both queues held, so that the checks stay queued.
        let thread = server.checks.this_thread();
        server.checks.lock_of(thread).answering = true;
        server.checks.lock_of(Which::Large).answering = true;
        let small = runtime.spawn({
            let server = Arc::clone(&server);
            async move { check(&server, 3, docs(at_most, 0)).await }
        });
        let large = runtime.spawn({
            let server = Arc::clone(&server);
            async move { check(&server, 3, docs(at_most + 1, 1000)).await }
        });
        runtime.block_on(tokio::task::yield_now());
        runtime.block_on(async {
            while server.checks.lock_of(thread).jobs.len()
                + server.checks.lock_of(Which::Large).jobs.len()
                < 2
            {
                tokio::task::yield_now().await;
            }
        });
        let lens = |which| -> Vec<usize> {
            let queue = server.checks.lock_of(which);
            queue.jobs.iter().map(|job| job.docs.len()).collect()
        };
        assert_eq!(lens(thread), [ON_THREAD_UP_TO]);
        assert_eq!(lens(Which::Large), [ON_THREAD_UP_TO + 1]);
        // Let go, the large queue is answered on the blocking pool by the
        // next large check, and the small one by the next small check.
        server.checks.lock_of(Which::Large).answering = false;
        server.checks.lock_of(thread).answering = false;
        let answers = runtime.block_on(async {
            let more_large = check(&server, 3, docs(at_most + 1, 2000)).await;
            let more_small = check(&server, 3, docs(1, 3000)).await;
            (more_large, more_small)
        });
        assert_eq!(answers.0.expect("large").len(), ON_THREAD_UP_TO + 1);
        assert_eq!(answers.1.expect("small").len(), 1);
        for (task, n) in [(small, ON_THREAD_UP_TO), (large, ON_THREAD_UP_TO + 1)] {
            let answer = runtime.block_on(task).expect("task").expect("answer");
            assert_eq!(answer.len(), n);
            assert!(answer.iter().all(Result::is_ok));
        }
        assert_eq!(
            server.index.len().expect("len"),
            at_most + 2 * (at_most + 1) + 1
        );
    }
}
