//! Dataset files: which format a file is in, whether this build reads it,
//! and streaming reads of its records (JSON Lines, CSV/TSV, and Parquet
//! through `parquet.rs` with the `parquet` feature; JSONL and CSV optionally
//! gzip or zstd compressed). Every read streams: nothing holds more than one
//! batch of records (Parquet: one record batch) at a time.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::error::CliError;

/// The largest record `dedup` reads from a dataset: a JSONL line, a CSV/TSV
/// record or a Parquet row's text, in bytes as decoded (after gzip or
/// zstd). A longer record is refused, naming it, before it is held in
/// memory whole: memory stays bounded whatever a compressed file expands to.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// A dataset file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Csv,
    Tsv,
    Parquet,
}

impl Format {
    pub fn parse(s: &str) -> Result<Format, String> {
        match s {
            "jsonl" | "ndjson" | "json" => Ok(Format::Jsonl),
            "csv" => Ok(Format::Csv),
            "tsv" => Ok(Format::Tsv),
            "parquet" => Ok(Format::Parquet),
            _ => Err(format!(
                "unknown dataset format `{s}`: expected jsonl, csv, tsv or parquet"
            )),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
            Format::Tsv => "tsv",
            Format::Parquet => "parquet",
        })
    }
}

/// Whether this build reads and writes Parquet (the `parquet` feature).
pub const PARQUET: bool = cfg!(feature = "parquet");

/// Refuses a Parquet file (an input, or the output) when `parquet_built` is
/// false ([`PARQUET`] in this build): the error names the file and says how
/// to get a build with Parquet. Called for every input before anything is
/// read or written.
pub fn check_supported(format: Format, name: &str, parquet_built: bool) -> Result<(), CliError> {
    if format == Format::Parquet && !parquet_built {
        return Err(unsupported(name));
    }
    Ok(())
}

/// The refusal of [`check_supported`].
pub fn unsupported(name: &str) -> CliError {
    CliError::Input(format!(
        "{name}: a Parquet file, and this simhashdb was built without Parquet support; \
             nothing was written. Build it with the `parquet` feature (`cargo install simhashdb \
             --features parquet`, or `--features parquet` in a clone) or use the `simhashdb` \
             command of the Python wheel (python/build-wheel.sh), which reads and writes Parquet"
    ))
}

/// A stream compression around a JSONL or CSV file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// The format and compression a file name says (`x.jsonl.gz`: JSONL, gzip),
/// if its extension is a dataset's.
pub fn by_extension(name: &Path) -> Option<(Format, Compression)> {
    let name = name.file_name()?.to_str()?.to_ascii_lowercase();
    let (stem, compression) = if let Some(s) = name.strip_suffix(".gz") {
        (s, Compression::Gzip)
    } else if let Some(s) = name.strip_suffix(".zst") {
        (s, Compression::Zstd)
    } else {
        (name.as_str(), Compression::None)
    };
    let ext = Path::new(stem).extension()?.to_str()?;
    let format = match ext {
        "jsonl" | "ndjson" => Format::Jsonl,
        "csv" => Format::Csv,
        "tsv" => Format::Tsv,
        "parquet" => Format::Parquet,
        _ => return None,
    };
    Some((format, compression))
}

/// The compression a file name's last extension says.
pub fn compression_of(name: &Path) -> Compression {
    match name.extension().and_then(|e| e.to_str()) {
        Some("gz") => Compression::Gzip,
        Some("zst") => Compression::Zstd,
        _ => Compression::None,
    }
}

/// One input file of a dataset.
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    pub name: String,
    pub format: Format,
    pub compression: Compression,
    pub len: u64,
    /// The file's modification time when the run began (with `len`, how
    /// [`open_unchanged`] tells that it changed between passes).
    pub modified: Option<std::time::SystemTime>,
}

/// Opens `src` for another pass, refusing a file whose size or
/// modification time differs from when the run began: the passes must read
/// the same records (a file still being written, or replaced meanwhile,
/// would pair one pass's record numbers with another's records).
pub(super) fn open_unchanged(src: &Source) -> Result<File, CliError> {
    let file = File::open(&src.path).map_err(|e| CliError::read(&src.name, e))?;
    let meta = file.metadata().map_err(|e| CliError::read(&src.name, e))?;
    if meta.len() != src.len || meta.modified().ok() != src.modified {
        return Err(CliError::Failure(format!(
            "{}: changed while dedup was reading it (dataset mode reads its inputs more than \
             once: {} bytes at the start, {} now); nothing was written",
            src.name,
            src.len,
            meta.len()
        )));
    }
    Ok(file)
}

/// The fields a read extracts.
#[derive(Debug, Clone)]
pub struct Fields {
    pub text: String,
    pub id: Option<String>,
    pub key: Option<String>,
}

/// One record as a read hands it over.
pub struct Rec<'a> {
    /// 0-based position of the record in its file.
    pub index: u64,
    /// Its text; empty when the record was not asked for.
    pub text: Cow<'a, str>,
    /// The value of the id field, if one was asked for and the record was.
    pub id: Option<Value>,
    /// The value of the `--keep newest:FIELD` field (`Null` if absent).
    pub key: Option<Value>,
    /// The record's bytes as they are in the file (JSONL and CSV).
    pub raw: Raw<'a>,
}

/// A record's original form, for writing it out unchanged.
pub enum Raw<'a> {
    /// A JSONL line without its line break.
    Line(&'a [u8]),
    /// A CSV/TSV record.
    Csv,
    /// A Parquet row (written through `parquet::for_each_batch` instead).
    #[cfg(feature = "parquet")]
    Row,
}

/// Where a record is, for messages: `FILE, line N` or `FILE, record N`.
pub fn at(src: &Source, what: &str, n: u64) -> String {
    format!("{}, {what} {n}", src.name)
}

pub(super) fn bad(src: &Source, what: &str, n: u64, msg: impl fmt::Display) -> CliError {
    CliError::Input(format!("{}: {msg}", at(src, what, n)))
}

/// A reader that counts the bytes read from the file (for the progress bar).
struct Counting<R> {
    inner: R,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

pub type Counter = std::sync::Arc<std::sync::atomic::AtomicU64>;

fn open(src: &Source, counter: &Counter) -> Result<Box<dyn BufRead>, CliError> {
    let file = open_unchanged(src)?;
    let file = Counting {
        inner: file,
        count: counter.clone(),
    };
    Ok(match src.compression {
        Compression::None => Box::new(BufReader::with_capacity(1 << 20, file)),
        Compression::Gzip => Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::read::MultiGzDecoder::new(BufReader::new(file)),
        )),
        Compression::Zstd => {
            let decoder = zstd::Decoder::new(file).map_err(|e| CliError::read(&src.name, e))?;
            Box::new(BufReader::with_capacity(1 << 20, decoder))
        }
    })
}

/// A read error inside a file: a broken compressed stream is bad input
/// (exit code 2), anything else a failure to read (exit code 1).
fn read_error(src: &Source, what: &str, n: u64, e: io::Error) -> CliError {
    if src.compression != Compression::None
        || matches!(
            e.kind(),
            io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof
        )
    {
        CliError::Input(format!(
            "{}: the file is damaged or cut off (while reading {what} {n}): {e}",
            src.name
        ))
    } else {
        CliError::Failure(format!("cannot read {}: {e}", at(src, what, n)))
    }
}

/// Reads every record of `src` in order, calling `f` for each. Records for
/// which `want(index)` is false are counted and handed over with an empty
/// text and no id or key (JSONL lines are then not parsed). The first bad
/// record stops the read with an error naming the file and the record.
pub fn scan(
    src: &Source,
    fields: &Fields,
    counter: &Counter,
    want: &mut dyn FnMut(u64) -> bool,
    f: &mut dyn FnMut(Rec<'_>) -> Result<(), CliError>,
) -> Result<(), CliError> {
    match src.format {
        Format::Jsonl => scan_jsonl(src, fields, counter, want, f),
        Format::Csv | Format::Tsv => scan_csv(src, fields, counter, want, f),
        #[cfg(feature = "parquet")]
        Format::Parquet => super::parquet::scan(src, fields, counter, want, f),
        // Refused when the run's inputs are listed (`check_supported`).
        #[cfg(not(feature = "parquet"))]
        Format::Parquet => Err(unsupported(&src.name)),
    }
}

fn scan_jsonl(
    src: &Source,
    fields: &Fields,
    counter: &Counter,
    want: &mut dyn FnMut(u64) -> bool,
    f: &mut dyn FnMut(Rec<'_>) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let mut reader = open(src, counter)?;
    let mut line = Vec::new();
    let (mut line_no, mut index) = (0u64, 0u64);
    loop {
        line.clear();
        let complete = read_line_within(&mut reader, &mut line, MAX_RECORD_BYTES + 2)
            .map_err(|e| read_error(src, "line", line_no + 1, e))?;
        if line.is_empty() {
            return Ok(());
        }
        line_no += 1;
        let mut body = line.strip_suffix(b"\n").unwrap_or(&line);
        body = body.strip_suffix(b"\r").unwrap_or(body);
        if !complete || body.len() > MAX_RECORD_BYTES {
            return Err(bad(
                src,
                "line",
                line_no,
                format!(
                    "the line is longer than the limit of {} MiB per record",
                    MAX_RECORD_BYTES >> 20
                ),
            ));
        }
        if line_no == 1 {
            // A byte order mark, as some Windows tools write (CSV's is
            // stripped by its reader).
            body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            continue; // a blank line is no record
        }
        let rec = if want(index) {
            let (text, id, key) =
                parse_json_record(body, fields).map_err(|msg| bad(src, "line", line_no, msg))?;
            Rec {
                index,
                text: Cow::Owned(text),
                id,
                key,
                raw: Raw::Line(body),
            }
        } else {
            Rec {
                index,
                text: Cow::Borrowed(""),
                id: None,
                key: None,
                raw: Raw::Line(body),
            }
        };
        f(rec)?;
        index += 1;
    }
}

/// Reads one line (with its `\n`, if any) into `line`, at most `limit`
/// bytes of it: whether the line ended (or the input did) within them. A
/// longer line is not read further, so it never costs more than `limit`.
fn read_line_within(
    reader: &mut dyn BufRead,
    line: &mut Vec<u8>,
    limit: usize,
) -> io::Result<bool> {
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(true);
        }
        let room = limit - line.len();
        let (take, ended) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) if at < room => (at + 1, true),
            _ => (buf.len().min(room), false),
        };
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if ended {
            return Ok(true);
        }
        if line.len() >= limit {
            return Ok(false);
        }
    }
}

/// The text, id and key of one JSON object, reading only those fields
/// into memory (the others are skipped).
fn parse_json_record(
    line: &[u8],
    fields: &Fields,
) -> Result<(String, Option<Value>, Option<Value>), String> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

    struct Seed<'f>(&'f Fields);
    #[derive(Default)]
    struct Found {
        text: Option<Value>,
        id: Option<Value>,
        key: Option<Value>,
    }
    impl<'de> DeserializeSeed<'de> for Seed<'_> {
        type Value = Found;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Found, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Seed<'_> {
        type Value = Found;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Found, A::Error> {
            let mut found = Found::default();
            while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                let name: &str = &name;
                let is_text = name == self.0.text;
                let is_id = self.0.id.as_deref() == Some(name);
                let is_key = self.0.key.as_deref() == Some(name);
                if is_text || is_id || is_key {
                    let v: Value = map.next_value()?;
                    if is_id {
                        found.id = Some(v.clone());
                    }
                    if is_key {
                        found.key = Some(v.clone());
                    }
                    if is_text {
                        found.text = Some(v);
                    }
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }

    let mut de = serde_json::Deserializer::from_slice(line);
    let found = Seed(fields)
        .deserialize(&mut de)
        .and_then(|found| de.end().map(|()| found))
        .map_err(|e| format!("invalid JSON: {e}"))?;
    let text = match found.text {
        Some(Value::String(s)) => s,
        Some(other) => {
            return Err(format!(
                "field `{}` is {}, not a string",
                fields.text,
                kind(&other)
            ));
        }
        None => return Err(format!("no field `{}` (the text field)", fields.text)),
    };
    let id = match (&fields.id, found.id) {
        (Some(name), Some(v)) => Some(check_id(name, v)?),
        (Some(name), None) => return Err(format!("no field `{name}` (the id field)")),
        (None, _) => None,
    };
    let key = fields
        .key
        .as_ref()
        .map(|_| found.key.unwrap_or(Value::Null));
    Ok((text, id, key))
}

/// An id as `--id-field` states the rule: a string, or an integer from 0
/// to 2^64 - 1 (in JSON written without a fraction or an exponent).
pub fn check_id(name: &str, v: Value) -> Result<Value, String> {
    match v {
        Value::String(_) => Ok(v),
        Value::Number(ref x) if x.is_u64() => Ok(v),
        Value::Number(x) => Err(format!(
            "field `{name}` (the id field) is {x}: an id is a string or an integer \
             from 0 to 2^64 - 1"
        )),
        other => Err(format!(
            "field `{name}` (the id field) is {}, not a string or an integer",
            kind(&other)
        )),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What [`CsvCheck`] found wrong in a CSV/TSV file, at a line.
#[derive(Debug)]
struct CsvFault {
    line: u64,
    what: String,
}

impl fmt::Display for CsvFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for CsvFault {}

/// Where [`CsvCheck`] is in the CSV grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CsvState {
    /// At the start of a field.
    FieldStart,
    /// In a field that did not start with a quote (quotes are literal).
    Unquoted,
    /// In a quoted field.
    Quoted,
    /// Just after a quote in a quoted field: it closes the field, or starts
    /// a doubled (escaped) quote.
    QuoteInQuoted,
}

/// The bytes of a CSV/TSV file on their way to the `csv` parser, checked
/// with the same grammar as it reads them (RFC 4180 quoting, doubled
/// quotes, `\n`, `\r\n` or `\r` ending a record) for what that parser lets
/// through silently: a quoted field never closed (it would run to the end
/// of the file, swallowing every record after it), a closing quote followed
/// by more than a delimiter or a line end (a stray quote that swallowed
/// records up to the next quote), and a record longer than
/// [`MAX_RECORD_BYTES`] (checked before the parser holds it).
pub struct CsvCheck<R> {
    inner: R,
    delimiter: u8,
    state: CsvState,
    /// The line being read (1-based) and where the open quote is.
    line: u64,
    quote_line: u64,
    /// Bytes of the record being read so far, and its first line.
    record_bytes: usize,
    record_line: u64,
    started: bool,
}

impl<R: Read> CsvCheck<R> {
    fn new(inner: R, delimiter: u8) -> CsvCheck<R> {
        CsvCheck {
            inner,
            delimiter,
            state: CsvState::FieldStart,
            line: 1,
            quote_line: 1,
            record_bytes: 0,
            record_line: 1,
            started: false,
        }
    }

    fn fault(&self, line: u64, what: String) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, CsvFault { line, what })
    }

    fn check(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        if !self.started {
            self.started = true;
            // The parser skips a byte order mark.
            bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        }
        use CsvState::*;
        for &b in bytes {
            let ends_record = match (self.state, b) {
                (Quoted, b'"') => {
                    self.state = QuoteInQuoted;
                    false
                }
                (Quoted, b'\n') => {
                    self.line += 1;
                    false
                }
                (Quoted, _) => false,
                (QuoteInQuoted, b'"') => {
                    self.state = Quoted;
                    false
                }
                (FieldStart, b'"') => {
                    self.state = Quoted;
                    self.quote_line = self.line;
                    false
                }
                (_, b'\n' | b'\r') => {
                    if b == b'\n' {
                        self.line += 1;
                    }
                    self.state = FieldStart;
                    true
                }
                (_, d) if d == self.delimiter => {
                    self.state = FieldStart;
                    false
                }
                (QuoteInQuoted, other) => {
                    return Err(self.fault(
                        self.line,
                        format!(
                            "the quoted field opened on line {} is closed by a quote followed by \
                             `{}`, not by a delimiter or the end of the line (a stray quote? \
                             a quote inside a quoted field is written twice)",
                            self.quote_line,
                            [other].escape_ascii()
                        ),
                    ));
                }
                (FieldStart | Unquoted, _) => {
                    self.state = Unquoted;
                    false
                }
            };
            if ends_record {
                self.record_bytes = 0;
                self.record_line = self.line;
            } else {
                self.record_bytes += 1;
                if self.record_bytes > MAX_RECORD_BYTES {
                    return Err(self.fault(
                        self.record_line,
                        format!(
                            "the record starting on this line is longer than the limit of {} \
                             MiB per record{}",
                            MAX_RECORD_BYTES >> 20,
                            if self.state == Quoted {
                                format!(" (in a quoted field opened on line {})", self.quote_line)
                            } else {
                                String::new()
                            }
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for CsvCheck<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 && self.state == CsvState::Quoted && !buf.is_empty() {
            return Err(self.fault(
                self.quote_line,
                "a quoted field opened on this line is never closed: the file ends inside it \
                 (a stray quote?)"
                    .into(),
            ));
        }
        self.check(&buf[..n])?;
        Ok(n)
    }
}

/// A CSV/TSV parser over a decompressed, checked file.
pub type CsvReader = csv::Reader<CsvCheck<Box<dyn BufRead>>>;

/// A CSV/TSV reader over `src` (decompressed), with its header.
pub fn csv_reader(
    src: &Source,
    counter: &Counter,
) -> Result<(CsvReader, csv::ByteRecord), CliError> {
    let reader = open(src, counter)?;
    let delimiter = if src.format == Format::Tsv {
        b'\t'
    } else {
        b','
    };
    let mut csv = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(true)
        .from_reader(CsvCheck::new(reader, delimiter));
    let header = csv
        .byte_headers()
        .map_err(|e| csv_error(src, 0, e))?
        .clone();
    Ok((csv, header))
}

fn csv_error(src: &Source, index: u64, e: csv::Error) -> CliError {
    let line = e.position().map(|p| p.line());
    if let csv::ErrorKind::Io(_) = e.kind() {
        let csv::ErrorKind::Io(io) = e.into_kind() else {
            unreachable!()
        };
        if let Some(fault) = io.get_ref().and_then(|e| e.downcast_ref::<CsvFault>()) {
            return CliError::Input(format!("{}, {fault}", src.name));
        }
        return read_error(src, "record", index + 1, io);
    }
    let msg = match line {
        Some(l) => format!("{e} (line {l})"),
        None => e.to_string(),
    };
    bad(src, "record", index + 1, msg)
}

fn column(
    src: &Source,
    header: &csv::ByteRecord,
    name: &str,
    role: &str,
) -> Result<usize, CliError> {
    header
        .iter()
        .position(|h| h == name.as_bytes())
        .ok_or_else(|| {
            CliError::Input(format!(
                "{}: no column `{name}` ({role}) in the header line",
                src.name
            ))
        })
}

fn scan_csv(
    src: &Source,
    fields: &Fields,
    counter: &Counter,
    want: &mut dyn FnMut(u64) -> bool,
    f: &mut dyn FnMut(Rec<'_>) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let (mut csv, header) = csv_reader(src, counter)?;
    let text_col = column(src, &header, &fields.text, "the text field")?;
    let id_col = match &fields.id {
        Some(n) => Some(column(src, &header, n, "the id field")?),
        None => None,
    };
    let key_col = match &fields.key {
        Some(n) => Some(column(src, &header, n, "the --keep field")?),
        None => None,
    };
    let mut record = csv::ByteRecord::new();
    let mut index = 0u64;
    loop {
        match csv.read_byte_record(&mut record) {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => return Err(csv_error(src, index, e)),
        }
        let rec = if want(index) {
            let get = |col: usize, role: &str| -> Result<&str, CliError> {
                let bytes = record.get(col).unwrap_or_default();
                std::str::from_utf8(bytes).map_err(|_| {
                    bad(
                        src,
                        "record",
                        index + 1,
                        format!("the {role} is not valid UTF-8"),
                    )
                })
            };
            let text = get(text_col, "text field")?;
            let id = match id_col {
                Some(c) => Some(Value::String(get(c, "id field")?.to_owned())),
                None => None,
            };
            let key = match key_col {
                Some(c) => Some(Value::String(get(c, "--keep field")?.to_owned())),
                None => None,
            };
            Rec {
                index,
                text: Cow::Borrowed(text),
                id,
                key,
                raw: Raw::Csv,
            }
        } else {
            Rec {
                index,
                text: Cow::Borrowed(""),
                id: None,
                key: None,
                raw: Raw::Csv,
            }
        };
        f(rec)?;
        index += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The refusal of Parquet by a build without the `parquet` feature is
    /// decided here, and checked in both builds: CI builds with the feature,
    /// so its refusal runs here there; the real binary's refusal runs in a
    /// default build (tests/cli_dataset.rs,
    /// `a_build_without_parquet_refuses_parquet_files_naming_them_before_writing_anything`).
    #[test]
    fn parquet_is_refused_naming_the_file_by_a_build_without_it_only() {
        assert_eq!(PARQUET, cfg!(feature = "parquet"));
        let e = check_supported(Format::Parquet, "shards/part-1.parquet", false).unwrap_err();
        assert_eq!(e.exit_code(), 2, "bad input");
        let msg = e.to_string();
        for part in [
            "shards/part-1.parquet",
            "nothing was written",
            "cargo install simhashdb --features parquet",
            "python/build-wheel.sh",
        ] {
            assert!(msg.contains(part), "`{part}` not in: {msg}");
        }
        assert!(check_supported(Format::Parquet, "x.parquet", true).is_ok());
        for format in [Format::Jsonl, Format::Csv, Format::Tsv] {
            for built in [false, true] {
                assert!(check_supported(format, "x", built).is_ok(), "{format}");
            }
        }
        // `--format parquet` and the .parquet extension name Parquet in
        // every build, so that a build without it refuses them.
        assert_eq!(Format::parse("parquet"), Ok(Format::Parquet));
        assert_eq!(
            by_extension(Path::new("d/x.PARQUET")),
            Some((Format::Parquet, Compression::None))
        );
    }
}
