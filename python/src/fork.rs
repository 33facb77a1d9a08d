//! Parallel work in a forked process.
//!
//! rayon's global pool is made once per process, by the first parallel
//! call. A process forked from one that had made it (`os.fork()`,
//! multiprocessing's "fork" start method) inherits the pool's state but none
//! of its threads, so parallel work there would wait forever. Every parallel
//! call of the package therefore runs through [`install`]: in the process
//! that imported the module, on the global pool (as the library's own calls
//! do); in any other process, on a pool of its own, made there.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

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
    let pid = std::process::id();
    if HOME.get().is_none_or(|&home| home == pid) {
        return f();
    }
    let pool = {
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
    };
    match pool {
        Some(pool) => pool.install(f),
        // No thread could be started here: the global pool, as before.
        None => f(),
    }
}
