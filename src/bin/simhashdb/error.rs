//! Errors of the command line and the exit codes they map to.

use std::fmt;
use std::io;

/// What went wrong, grouped by exit code.
#[derive(Debug)]
pub enum CliError {
    /// Bad input or arguments: exit code 2.
    Input(String),
    /// An I/O or runtime failure: exit code 1.
    Failure(String),
    /// An index file failed its checksum or could not be decoded: exit code 3.
    Damaged(String),
    /// The reader of our standard output went away: end quietly.
    BrokenPipe,
}

impl From<simhashdb::Error> for CliError {
    fn from(e: simhashdb::Error) -> CliError {
        use simhashdb::Error;
        match e {
            Error::Corrupted { .. } | Error::ManifestMissing { .. } => {
                CliError::Damaged(e.to_string())
            }
            Error::DistanceTooLarge { .. }
            | Error::Mismatch { .. }
            | Error::InvalidArgument(_)
            | Error::Plan(_)
            | Error::NotEmpty { .. } => CliError::Input(e.to_string()),
            _ => CliError::Failure(e.to_string()),
        }
    }
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) => 2,
            CliError::Failure(_) => 1,
            CliError::Damaged(_) => 3,
            CliError::BrokenPipe => 0,
        }
    }

    /// An I/O error while writing output, with the output's name.
    pub fn write(target: &str, e: io::Error) -> CliError {
        if e.kind() == io::ErrorKind::BrokenPipe {
            CliError::BrokenPipe
        } else {
            CliError::Failure(format!("cannot write {target}: {e}"))
        }
    }

    /// An I/O error while reading input, with the input's name.
    pub fn read(source: &str, e: io::Error) -> CliError {
        CliError::Failure(format!("cannot read {source}: {e}"))
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Input(m) | CliError::Failure(m) | CliError::Damaged(m) => f.write_str(m),
            CliError::BrokenPipe => f.write_str("broken pipe"),
        }
    }
}
