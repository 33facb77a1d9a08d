//! Parallel work in a forked process.
//!
//! rayon's global pool is made once per process, by the first parallel
//! call. A process forked from one that had made it (`os.fork()`,
//! multiprocessing's "fork" start method) inherits the pool's state but none
//! of its threads, so parallel work there would wait forever. Every parallel
//! call of the package therefore runs through [`install`]: in the process
//! that imported the module, on the global pool (as the library's own calls
//! do); in any other process, on a pool of its own, made there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};

/// The process that imported the module.
static HOME: OnceLock<u32> = OnceLock::new();

/// A pool made in a process other than [`HOME`], with that process's id.
static OWN_POOL: Mutex<Option<(u32, Arc<ThreadPool>)>> = Mutex::new(None);

/// Records the importing process (at module import).
pub fn record_home() {
    HOME.get_or_init(std::process::id);
}

/// Runs `f`, whose parallel iterators use a pool whose threads exist in
/// this process.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match own_pool() {
        None => f(),
        Some(pool) => pool.install(f),
    }
}

/// The pool of this process when it is not [`HOME`] (made on first use);
/// `None` in [`HOME`], or when no thread could be started here (the global
/// pool is used then, as before).
fn own_pool() -> Option<Arc<ThreadPool>> {
    let pid = std::process::id();
    if HOME.get().is_none_or(|&home| home == pid) {
        return None;
    }
    let mut own = OWN_POOL.lock().unwrap_or_else(PoisonError::into_inner);
    match own.as_ref() {
        Some((owner, pool)) if *owner == pid => Some(pool.clone()),
        _ => match ThreadPoolBuilder::new().build() {
            Ok(pool) => {
                let pool = Arc::new(pool);
                *own = Some((pid, pool.clone()));
                Some(pool)
            }
            Err(_) => None,
        },
    }
}

/// How a long call run by [`install_watched`] learns of Ctrl-C between two
/// of its steps.
pub struct Signals {
    /// Whether the calling thread watches for signals (the call runs on
    /// another thread, where Python's handlers do not run).
    watched: bool,
    /// Set by the watching thread when a handler raised.
    raised: AtomicBool,
    /// What it raised, for the call to return.
    error: Mutex<Option<PyErr>>,
}

impl Signals {
    /// `Err` with what a signal handler raised (`KeyboardInterrupt` after
    /// Ctrl-C) since the call started. Called without the GIL.
    pub fn check(&self) -> PyResult<()> {
        if !self.watched {
            return Python::attach(|py| py.check_signals());
        }
        if !self.raised.load(Ordering::Acquire) {
            return Ok(());
        }
        let error = self
            .error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // A second check after the error was taken: the call is stopping.
        Err(error.unwrap_or_else(|| pyo3::exceptions::PyKeyboardInterrupt::new_err(())))
    }
}

/// How often the calling thread runs Python's signal handlers while a
/// forked process's pool runs the call.
const WATCH_EVERY: Duration = Duration::from_millis(20);

/// Runs `f` as [`install`] does, without the GIL, giving it a [`Signals`] to
/// check between its steps. In [`HOME`], `f` runs on the calling thread, and
/// the check runs Python's signal handlers itself. In a forked process, `f`
/// runs on that process's pool while the calling thread (Python's main
/// thread, where the handlers run) runs them every [`WATCH_EVERY`] and
/// hands what they raise to `f`'s next check: without that, Ctrl-C would be
/// seen only when the call ends.
pub fn install_watched<R: Send>(py: Python<'_>, f: impl FnOnce(&Signals) -> R + Send) -> R {
    let pool = own_pool();
    let signals = Signals {
        watched: pool.is_some(),
        raised: AtomicBool::new(false),
        error: Mutex::new(None),
    };
    let Some(pool) = pool else {
        return py.detach(|| f(&signals));
    };
    let done = AtomicBool::new(false);
    let mut out = None;
    py.detach(|| {
        pool.in_place_scope(|scope| {
            scope.spawn(|_| {
                out = Some(f(&signals));
                done.store(true, Ordering::Release);
            });
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(WATCH_EVERY);
                if signals.raised.load(Ordering::Acquire) {
                    continue;
                }
                if let Err(e) = Python::attach(|py| py.check_signals()) {
                    *signals.error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e);
                    signals.raised.store(true, Ordering::Release);
                }
            }
        })
    });
    out.expect("the spawned call ran")
}
