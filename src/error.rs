//! Errors of the persistent index.

use std::fmt;
use std::io;
use std::path::PathBuf;

use crate::plan::PlanError;

/// What went wrong in an [`Index`](crate::Index) operation.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A file-system call failed.
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// What the engine was doing ("write", "sync", "rename", ...).
        op: &'static str,
        /// The operating system's error.
        source: io::Error,
    },
    /// A file of the index holds bytes that fail their checksum or cannot be
    /// decoded. The index is not used; restore it from a copy or rebuild it.
    Corrupted {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damage within the file (best known).
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// Another process (or another `Index` in this one) holds the directory's lock.
    Locked {
        /// The index directory.
        dir: PathBuf,
        /// Whether the holder is another `Index` (or lock) of this process;
        /// the message says which.
        in_this_process: bool,
    },
    /// A query asked for a distance the index's plan cannot answer exactly.
    DistanceTooLarge {
        /// The distance asked for.
        requested: u32,
        /// The largest distance the plan answers.
        plan_k: u32,
    },
    /// The index was created with other settings than those given to `open`.
    Mismatch {
        /// Which setting ("plan", "fingerprint config").
        what: &'static str,
        /// As recorded in the index.
        recorded: String,
        /// As given.
        given: String,
    },
    /// A plan could not be built.
    Plan(PlanError),
    /// An argument was refused (a name too long, ...); nothing was written.
    InvalidArgument(String),
    /// An earlier write or sync failed (on the writing thread or the merge
    /// thread), so the state on disk is uncertain: every later write fails
    /// until the index is reopened.
    Poisoned {
        /// The first failure's message.
        cause: String,
    },
    /// The index was opened read-only.
    ReadOnly,
    /// The directory holds index files (segments, doc maps, WALs) but no
    /// `MANIFEST`, the commit point that says which of them are live. Nothing
    /// was changed; [`Index::repair`](crate::Index::repair) (`simhashdb
    /// repair`) rebuilds a manifest from them.
    ManifestMissing {
        /// The index directory.
        dir: PathBuf,
        /// The index files found there.
        found: Vec<String>,
    },
    /// A new index was to be created in a directory that holds other files;
    /// nothing was written. Use a new or empty directory (or
    /// `Options::create_in_non_empty_dir`).
    NotEmpty {
        /// The directory.
        dir: PathBuf,
        /// The files found there.
        found: Vec<String>,
    },
    /// One of the index's counters (its manifest's generation, next segment
    /// id, next WAL id or next sequence number) is too close to 2^63, which
    /// the format does not allow, for a write (or an open for writing) to go
    /// on: it was refused and nothing was written. The index can still be
    /// opened read-only. Only a manifest written with such counters gets
    /// there (docs/FORMAT.md, "Manifest file").
    CounterLimit {
        /// Which counter.
        what: &'static str,
        /// Its value.
        value: u64,
    },
}

/// At most a few names of a list, and how many more there are.
fn some_names(names: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut text = names
        .iter()
        .take(SHOWN)
        .map(|n| n.escape_debug().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, op, source } => {
                write!(f, "cannot {op} {}: {source}", path.display())
            }
            Error::Corrupted {
                path,
                offset,
                reason,
            } => {
                write!(
                    f,
                    "{} is corrupted at byte {offset}: {reason}",
                    path.display()
                )?;
                // The format layer's reasons already say what to do.
                if !reason.contains("rebuild") {
                    write!(f, "; restore the index from a copy or rebuild it")?;
                }
                Ok(())
            }
            Error::Locked {
                dir,
                in_this_process,
            } => f.write_str(&crate::engine::lock::locked_message(dir, *in_this_process)),
            Error::DistanceTooLarge { requested, plan_k } => write!(
                f,
                "distance {requested} exceeds the index's k = {plan_k}: the answer could be \
                 incomplete, so it is refused (create the index with k >= {requested})"
            ),
            Error::Mismatch {
                what,
                recorded,
                given,
            } => write!(
                f,
                "the index was created with {what} `{recorded}`, but `{given}` was given; \
                 open it with its recorded settings (or none)"
            ),
            Error::Plan(e) => write!(f, "{e}"),
            Error::InvalidArgument(m) => f.write_str(m),
            Error::Poisoned { cause } => write!(
                f,
                "an earlier write failed ({cause}), so the index refuses further writes; \
                 reopen it to recover"
            ),
            Error::ReadOnly => f.write_str("the index is open read-only"),
            Error::ManifestMissing { dir, found } => write!(
                f,
                "{} holds index files but no MANIFEST (found {}); nothing was changed: \
                 `simhashdb repair --db {}` rebuilds a manifest from the files that pass their \
                 checksums and sets the others aside",
                dir.display(),
                some_names(found),
                dir.display()
            ),
            Error::NotEmpty { dir, found } => write!(
                f,
                "{} holds no index and is not empty (found {}); nothing was written: create \
                 the index in a new or empty directory",
                dir.display(),
                some_names(found)
            ),
            Error::CounterLimit { what, value } => write!(
                f,
                "the index's {what} is {value}, too close to its limit of 2^63 to take more \
                 writes: refused, and nothing was written; the index can still be opened \
                 read-only (copy its documents into a new index to write more)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Plan(e) => Some(e),
            _ => None,
        }
    }
}

impl From<crate::search::DistanceError> for Error {
    fn from(e: crate::search::DistanceError) -> Error {
        Error::DistanceTooLarge {
            requested: e.requested,
            plan_k: e.plan_k,
        }
    }
}

impl From<PlanError> for Error {
    fn from(e: PlanError) -> Error {
        Error::Plan(e)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_advice_is_given_exactly_once() {
        let corrupted = |reason: &str| {
            Error::Corrupted {
                path: PathBuf::from("i/1.seg"),
                offset: 7,
                reason: reason.to_string(),
            }
            .to_string()
        };
        let plain = corrupted("the file is 3 bytes; the manifest says 9");
        assert_eq!(plain.matches("rebuild").count(), 1, "{plain}");
        assert!(plain.starts_with("i/1.seg is corrupted at byte 7: the file is 3 bytes"));
        let advised =
            corrupted("checksum mismatch; restore it from a backup, or rebuild the index");
        assert_eq!(advised.matches("rebuild").count(), 1, "{advised}");
    }
}
