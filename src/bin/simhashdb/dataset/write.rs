//! Outputs of `dedup` on datasets: a temporary file next to the output,
//! renamed over it only when everything was written, so a failure leaves
//! no output behind.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::Schema;
use parquet::arrow::ArrowWriter;

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

/// A file written under a temporary name in the directory of its final
/// path; removed if dropped before [`Pending::commit`].
pub struct Pending {
    tmp: PathBuf,
    path: PathBuf,
    name: String,
    committed: bool,
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
            .ok_or_else(|| CliError::Input(format!("--output {name}: not a file name")))?;
        let mut tmp_name = std::ffi::OsString::from(".");
        tmp_name.push(file_name);
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = dir.join(tmp_name);
        let file = File::create(&tmp).map_err(|e| CliError::write(&name, e))?;
        Ok((
            Pending {
                tmp,
                path: path.to_path_buf(),
                name,
                committed: false,
            },
            file,
        ))
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
    File(Pending, Stream),
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
            inner: ByteInner::File(pending, stream),
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
            ByteInner::File(_, s) => s,
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

/// A Parquet output with the schema of the input, written through a
/// [`Pending`] temporary (zstd-compressed columns).
pub struct ParquetOut {
    name: String,
    pending: Pending,
    writer: ArrowWriter<File>,
}

impl ParquetOut {
    pub fn open(path: &Path, schema: Arc<Schema>) -> Result<ParquetOut, CliError> {
        let name = path.display().to_string();
        let (pending, file) = Pending::new(path)?;
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .build();
        let writer = ArrowWriter::try_new(file, schema, Some(props))
            .map_err(|e| CliError::Failure(format!("cannot write {name}: {e}")))?;
        Ok(ParquetOut {
            name,
            pending,
            writer,
        })
    }

    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), CliError> {
        self.writer
            .write(batch)
            .map_err(|e| CliError::Failure(format!("cannot write {}: {e}", self.name)))
    }

    pub fn finish(self) -> Result<(), CliError> {
        let file = self
            .writer
            .into_inner()
            .map_err(|e| CliError::Failure(format!("cannot write {}: {e}", self.name)))?;
        self.pending.commit(file)
    }
}
