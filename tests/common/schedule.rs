//! Gates at the engine's schedule points (`simhashdb::engine::schedule`):
//! a test holds a point, and every thread that reaches it waits there until
//! the test releases it, so that the interleaving under test happens every
//! run. Waits for a thread to arrive are bounded by [`HANG`]: a hang
//! detector (a regression fails instead of hanging the suite), not a timing
//! threshold.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use simhashdb::engine::schedule::{Point, Schedule};

/// How long a test waits for something that must happen before it calls
/// it a hang. Generous: the machine is shared and may be slow.
pub const HANG: Duration = Duration::from_secs(300);

#[derive(Default)]
struct State {
    held: HashSet<Point>,
    /// Points held only at their n-th arrival (counted from 1).
    held_nth: HashMap<Point, usize>,
    /// (first, n, then): at the `n`-th arrival at `first`, the next
    /// arrival at `then` is held.
    after: Vec<(Point, usize, Point)>,
    failing: HashSet<Point>,
    /// Threads waiting at each point now.
    waiting: HashMap<Point, usize>,
    /// Times each point was reached.
    reached: HashMap<Point, usize>,
    /// Points whose arrivals count, and are held, only on the thread of
    /// this name; other threads pass them as if no gate were there.
    only_on: HashMap<Point, String>,
    /// Set when the test's handle is dropped (a test that failed with
    /// threads held): every gate opens and stays open.
    open: bool,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// The test's handle. Dropping it opens every gate, so that an index
/// dropped after a failed assertion can stop its threads.
#[derive(Default)]
pub struct Gates {
    shared: Arc<Shared>,
}

impl Gates {
    pub fn new() -> Gates {
        Gates::default()
    }

    /// What `Options::schedule` is given.
    pub fn schedule(&self) -> Schedule {
        let shared = self.shared.clone();
        Schedule::new(move |point| {
            let mut s = lock(&shared.state);
            if let Some(name) = s.only_on.get(&point)
                && std::thread::current().name() != Some(name.as_str())
            {
                return Ok(());
            }
            let nth = {
                let reached = s.reached.entry(point).or_default();
                *reached += 1;
                *reached
            };
            let held = |s: &State| {
                !s.open && (s.held.contains(&point) || s.held_nth.get(&point) == Some(&nth))
            };
            let then: Vec<Point> = s
                .after
                .iter()
                .filter(|&&(first, n, _)| first == point && n == nth)
                .map(|&(_, _, then)| then)
                .collect();
            for then in then {
                let next = s.reached.get(&then).copied().unwrap_or(0) + 1;
                s.held_nth.insert(then, next);
            }
            if held(&s) {
                *s.waiting.entry(point).or_default() += 1;
                shared.changed.notify_all();
                while held(&s) {
                    s = shared.changed.wait(s).unwrap_or_else(|e| e.into_inner());
                }
                *s.waiting.entry(point).or_default() -= 1;
            }
            shared.changed.notify_all();
            if s.failing.contains(&point) {
                return Err(std::io::Error::other(format!(
                    "failed at {point:?} by the test"
                )));
            }
            Ok(())
        })
    }

    /// Threads reaching `point` from now on wait there.
    pub fn hold(&self, point: Point) {
        lock(&self.shared.state).held.insert(point);
    }

    /// The `n`-th thread to reach `point` (counting from 1, since the
    /// gates were made) waits there.
    pub fn hold_nth(&self, point: Point, n: usize) {
        lock(&self.shared.state).held_nth.insert(point, n);
    }

    /// At the `n`-th arrival at `first`, the next arrival at `then` is
    /// held: armed at that instant, so no arrival slips between.
    pub fn hold_after(&self, first: Point, n: usize, then: Point) {
        lock(&self.shared.state).after.push((first, n, then));
    }

    /// From now on, only the thread named `thread` arrives at `point`:
    /// other threads pass it uncounted and unheld (so that "the first
    /// arrival" is that thread's where two threads reach one point).
    pub fn only_on(&self, point: Point, thread: &str) {
        lock(&self.shared.state)
            .only_on
            .insert(point, thread.to_string());
    }

    /// Lets the threads waiting at `point` (and later ones) go on.
    pub fn release(&self, point: Point) {
        let mut s = lock(&self.shared.state);
        s.held.remove(&point);
        s.held_nth.remove(&point);
        drop(s);
        self.shared.changed.notify_all();
    }

    /// `point` returns an error from now on (it fails a thread's start).
    pub fn fail(&self, point: Point) {
        lock(&self.shared.state).failing.insert(point);
    }

    /// How many times `point` was reached.
    pub fn reached(&self, point: Point) -> usize {
        lock(&self.shared.state)
            .reached
            .get(&point)
            .copied()
            .unwrap_or(0)
    }

    /// Whether a thread waits at `point` now.
    pub fn is_waiting(&self, point: Point) -> bool {
        lock(&self.shared.state)
            .waiting
            .get(&point)
            .is_some_and(|&n| n > 0)
    }

    /// Waits until a thread waits at `point` (which the test holds).
    pub fn wait_for(&self, point: Point) {
        self.wait_until(&format!("a thread waiting at {point:?}"), |s| {
            s.waiting.get(&point).is_some_and(|&n| n > 0)
        });
    }

    /// Waits until `point` has been reached `n` times in all.
    pub fn wait_reached(&self, point: Point, n: usize) {
        self.wait_until(&format!("{point:?} reached {n} times"), |s| {
            s.reached.get(&point).copied().unwrap_or(0) >= n
        });
    }

    fn wait_until(&self, what: &str, done: impl Fn(&State) -> bool) {
        let deadline = Instant::now() + HANG;
        let mut s = lock(&self.shared.state);
        while !done(&s) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "hang: no sign of {what} in {HANG:?}");
            s = self
                .shared
                .changed
                .wait_timeout(s, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Drop for Gates {
    fn drop(&mut self) {
        lock(&self.shared.state).open = true;
        self.shared.changed.notify_all();
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on its own thread and returns its result, failing the test if
/// it has not returned within [`HANG`] (a deadlock, rather than a slow
/// machine). A hung thread is left behind; the test fails.
pub fn without_hanging<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(HANG) {
        Ok(value) => {
            handle.join().expect("thread");
            value
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // It panicked: report its panic.
            match handle.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the thread sends before it returns"),
            }
        }
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("hang: {what} did not finish in {HANG:?} (a deadlock)")
        }
    }
}
