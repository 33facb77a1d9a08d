//! Outputs of `dedup` on datasets: a temporary file next to the output,
//! renamed over it only when everything was written, so a failure leaves
//! no output behind.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::read::{Compression, compression_of};
use crate::error::CliError;

/// The bytes of a file being written, compressed as its name says.
enum Stream {
    Plain(BufWriter<File>),
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
    Zstd(zstd::Encoder<'static, BufWriter<File>>),
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(w) => w.write(buf),
            Stream::Gzip(w) => w.write(buf),
            Stream::Zstd(w) => w.write(buf),
        }
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Stream::Plain(w) => w.write_all(buf),
            Stream::Gzip(w) => w.write_all(buf),
            Stream::Zstd(w) => w.write_all(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(w) => w.flush(),
            Stream::Gzip(w) => w.flush(),
            Stream::Zstd(w) => w.flush(),
        }
    }
}

impl Stream {
    fn finish(self) -> io::Result<File> {
        let buffered = match self {
            Stream::Plain(w) => w,
            Stream::Gzip(w) => w.finish()?,
            Stream::Zstd(w) => w.finish()?,
        };
        buffered.into_inner().map_err(|e| e.into_error())
    }
}

/// Temporary files removed when the process is interrupted (SIGINT, SIGTERM
/// or SIGHUP): a signal ends the process without unwinding, so
/// [`Pending`]'s `Drop` does not run. The handler does only what a signal
/// handler may: it unlinks the registered paths (C strings set up before)
/// and ends the process by the same signal, with its default action.
#[cfg(unix)]
mod on_signal {
    use std::ffi::{CString, c_char, c_int};
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::ptr;
    use std::sync::Once;
    use std::sync::atomic::{AtomicPtr, Ordering};

    const SIGHUP: c_int = 1;
    const SIGINT: c_int = 2;
    const SIGTERM: c_int = 15;
    const SIG_DFL: usize = 0;

    unsafe extern "C" {
        fn signal(signum: c_int, handler: usize) -> usize;
        fn raise(signum: c_int) -> c_int;
        fn unlink(path: *const c_char) -> c_int;
    }

    /// The paths to remove; a `dedup` has at most two outputs pending.
    static PATHS: [AtomicPtr<c_char>; 4] = [const { AtomicPtr::new(ptr::null_mut()) }; 4];
    static INSTALL: Once = Once::new();

    extern "C" fn remove_and_end(signum: c_int) {
        for slot in &PATHS {
            let path = slot.load(Ordering::SeqCst);
            if !path.is_null() {
                // SAFETY: a non-null slot holds a C string leaked by
                // `register`, never freed; `unlink`, `signal` and `raise`
                // are async-signal-safe.
                unsafe { unlink(path) };
            }
        }
        // SAFETY: as above; restoring the default action and raising the
        // signal again ends the process as the signal would have.
        unsafe {
            signal(signum, SIG_DFL);
            raise(signum);
        }
    }

    /// Registers `path` for removal on a signal; the slot to free with
    /// [`unregister`], or `None` when every slot is taken (or the path has
    /// a NUL byte).
    pub fn register(path: &Path) -> Option<usize> {
        INSTALL.call_once(|| {
            for signum in [SIGHUP, SIGINT, SIGTERM] {
                // SAFETY: installs a handler that is async-signal-safe
                // (above) for signals whose default action ends the process.
                unsafe { signal(signum, remove_and_end as extern "C" fn(c_int) as usize) };
            }
        });
        let c = CString::new(path.as_os_str().as_bytes()).ok()?;
        let raw = c.into_raw();
        for (i, slot) in PATHS.iter().enumerate() {
            if slot
                .compare_exchange(ptr::null_mut(), raw, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return Some(i);
            }
        }
        // SAFETY: `raw` came from `into_raw` just above and was not shared.
        drop(unsafe { CString::from_raw(raw) });
        None
    }

    /// Stops removing the path of `slot` on a signal. Its string is leaked
    /// (a few bytes per output): a handler running on another thread may
    /// still be reading it.
    pub fn unregister(slot: usize) {
        PATHS[slot].store(ptr::null_mut(), Ordering::SeqCst);
    }
}

/// A file written under a temporary name in the directory of its final
/// path; removed if dropped before [`Pending::commit`], or if the process
/// is interrupted by SIGINT, SIGTERM or SIGHUP.
pub struct Pending {
    tmp: PathBuf,
    path: PathBuf,
    name: String,
    committed: bool,
    #[cfg(unix)]
    signal_slot: Option<usize>,
}

impl Pending {
    pub fn new(path: &Path) -> Result<(Pending, File), CliError> {
        let name = path.display().to_string();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file_name = path
            .file_name()
            .ok_or_else(|| CliError::Input(format!("{name}: not a file name")))?;
        if path.is_dir() {
            return Err(CliError::Input(format!("{name}: is a directory")));
        }
        if !dir.is_dir() {
            return Err(CliError::Input(format!(
                "{name}: no directory {} to write it in",
                dir.display()
            )));
        }
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(file_name);
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        // Registered before it exists: a signal between the two removes
        // nothing, where the other order could leave the file.
        #[cfg(unix)]
        let signal_slot = on_signal::register(&tmp);
        let pending = Pending {
            tmp,
            path: path.to_path_buf(),
            name,
            committed: false,
            #[cfg(unix)]
            signal_slot,
        };
        let file = File::create(&pending.tmp).map_err(|e| CliError::write(&pending.name, e))?;
        Ok((pending, file))
    }

    /// Syncs the finished file and renames it to its final name.
    pub fn commit(mut self, file: File) -> Result<(), CliError> {
        file.sync_all()
            .and_then(|()| fs::rename(&self.tmp, &self.path))
            .map_err(|e| CliError::write(&self.name, e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.tmp);
        }
        #[cfg(unix)]
        if let Some(slot) = self.signal_slot {
            on_signal::unregister(slot);
        }
    }
}

/// A byte output: standard output, or a file (compressed by its extension)
/// written through a [`Pending`] temporary.
pub struct ByteOut {
    name: String,
    inner: ByteInner,
}

enum ByteInner {
    Stdout(BufWriter<io::Stdout>),
    File(Pending, Box<Stream>),
}

impl ByteOut {
    pub fn open(path: Option<&Path>) -> Result<ByteOut, CliError> {
        let Some(path) = path else {
            return Ok(ByteOut {
                name: "standard output".into(),
                inner: ByteInner::Stdout(BufWriter::with_capacity(1 << 20, io::stdout())),
            });
        };
        let (pending, file) = Pending::new(path)?;
        let name = path.display().to_string();
        let buffered = BufWriter::with_capacity(1 << 20, file);
        let stream = match compression_of(path) {
            Compression::None => Stream::Plain(buffered),
            Compression::Gzip => Stream::Gzip(flate2::write::GzEncoder::new(
                buffered,
                flate2::Compression::default(),
            )),
            Compression::Zstd => Stream::Zstd(
                zstd::Encoder::new(buffered, 3).map_err(|e| CliError::write(&name, e))?,
            ),
        };
        Ok(ByteOut {
            name,
            inner: ByteInner::File(pending, Box::new(stream)),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn write_all(&mut self, bytes: &[u8]) -> Result<(), CliError> {
        let r = match &mut self.inner {
            ByteInner::Stdout(w) => w.write_all(bytes),
            ByteInner::File(_, s) => s.write_all(bytes),
        };
        r.map_err(|e| CliError::write(&self.name, e))
    }

    /// A `Write` view (for the CSV writer).
    pub fn writer(&mut self) -> &mut dyn Write {
        match &mut self.inner {
            ByteInner::Stdout(w) => w,
            ByteInner::File(_, s) => s.as_mut(),
        }
    }

    pub fn finish(self) -> Result<(), CliError> {
        let name = self.name;
        match self.inner {
            ByteInner::Stdout(mut w) => w.flush().map_err(|e| CliError::write(&name, e)),
            ByteInner::File(pending, stream) => {
                let file = stream.finish().map_err(|e| CliError::write(&name, e))?;
                pending.commit(file)
            }
        }
    }
}
