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
use simhashdb::Match;
use tokio::sync::oneshot;

use super::Server;
use super::error::ApiError;

/// Per document: inserted, or the matches that made it a duplicate.
pub type Answers = Vec<Result<(), Vec<Match>>>;

/// A document to check: id, fingerprint, name.
pub type Doc = (u64, u64, Option<String>);

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
}

/// The checks waiting to be answered.
#[derive(Default)]
pub struct CheckQueue {
    queue: Mutex<Queue>,
}

impl CheckQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Checks `docs` at distance `k`, together with the checks queued at the
/// same time.
pub async fn check(server: &Arc<Server>, k: u32, docs: Vec<Doc>) -> Result<Answers, ApiError> {
    let (reply, answer) = oneshot::channel();
    let answer_now = {
        let mut queue = server.checks.lock();
        queue.jobs.push(Job { k, docs, reply });
        !std::mem::replace(&mut queue.answering, true)
    };
    if answer_now {
        // One round, this request's included, on this thread (no await
        // inside: it cannot be cancelled halfway); the checks that queued
        // meanwhile go to a task of their own, so this request's answer
        // does not wait for them.
        let more = {
            let _answering = Answering(&server.checks);
            round(server);
            std::mem::forget(_answering);
            let mut queue = server.checks.lock();
            queue.answering = !queue.jobs.is_empty();
            queue.answering
        };
        if more {
            let server = Arc::clone(server);
            tokio::spawn(async move {
                let answering = Answering(&server.checks);
                loop {
                    round(&server);
                    let mut queue = server.checks.lock();
                    if queue.jobs.is_empty() {
                        queue.answering = false;
                        break;
                    }
                }
                std::mem::forget(answering);
            });
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

/// Lets the next check answer the queue if a round panics (its own jobs
/// are answered with an error when their senders drop); forgotten when the
/// round returns.
struct Answering<'a>(&'a CheckQueue);

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.lock().answering = false;
    }
}

/// Answers every queued job: one library call per run of jobs at one
/// distance.
fn round(server: &Server) {
    let jobs = std::mem::take(&mut server.checks.lock().jobs);
    let mut jobs = jobs.into_iter().peekable();
    while let Some(first) = jobs.next() {
        let k = first.k;
        let mut run = vec![first];
        while let Some(job) = jobs.next_if(|job| job.k == k) {
            run.push(job);
        }
        answer_run(server, k, run);
    }
}

fn answer_run(server: &Server, k: u32, mut run: Vec<Job>) {
    if run.len() == 1 {
        let job = run.remove(0);
        let answer = server
            .index
            .insert_if_new_many(job.docs, k)
            .map_err(ApiError::from_write);
        let _ = job.reply.send(answer);
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
    match server.index.insert_if_new_many(docs, k) {
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
