//! Dataset files: which format a file is in, and streaming reads of its
//! records (JSON Lines, CSV/TSV, Parquet; JSONL and CSV optionally gzip or
//! zstd compressed). Every read streams: nothing holds more than one batch
//! of records (Parquet: one record batch) at a time.

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
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
fn open_unchanged(src: &Source) -> Result<File, CliError> {
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
    /// A Parquet row (written through [`for_each_batch`] instead).
    Row,
}

/// Where a record is, for messages: `FILE, line N` or `FILE, record N`.
pub fn at(src: &Source, what: &str, n: u64) -> String {
    format!("{}, {what} {n}", src.name)
}

fn bad(src: &Source, what: &str, n: u64, msg: impl fmt::Display) -> CliError {
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
        Format::Parquet => scan_parquet(src, fields, counter, want, f),
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

fn parquet_error(src: &Source, e: impl fmt::Display) -> CliError {
    CliError::Input(format!("{}: not a readable Parquet file: {e}", src.name))
}

/// Reads the record batches of a Parquet file, with all its columns or
/// only `columns`, calling `f` with each batch and the file-local index of
/// its first row.
pub fn for_each_batch(
    src: &Source,
    columns: Option<&[&str]>,
    counter: &Counter,
    f: &mut dyn FnMut(&RecordBatch, u64) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let file = open_unchanged(src)?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| parquet_error(src, e))?;
    let builder = match columns {
        Some(names) => {
            let schema = builder.parquet_schema();
            let roots: Vec<usize> = names
                .iter()
                .filter_map(|n| builder.schema().index_of(n).ok())
                .collect();
            let mask = ProjectionMask::roots(schema, roots);
            builder.with_projection(mask)
        }
        None => builder,
    };
    let rows = batch_rows(builder.metadata(), columns);
    let reader = builder
        .with_batch_size(rows)
        .build()
        .map_err(|e| parquet_error(src, e))?;
    let mut first = 0u64;
    let len = src.len;
    for batch in reader {
        let batch = batch.map_err(|e| {
            CliError::Input(format!(
                "{}, record {}: cannot decode the Parquet data: {e}",
                src.name,
                first + 1
            ))
        })?;
        // Parquet is read through its own file handle: count it by rows.
        f(&batch, first)?;
        first += batch.num_rows() as u64;
    }
    counter.fetch_add(len, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// Rows per record batch: 4,096, or fewer where the rows of a row group
/// (of the columns read, as decoded) average more than 8 KiB, so that a
/// batch holds about 32 MiB of values whatever the file's compression.
fn batch_rows(meta: &parquet::file::metadata::ParquetMetaData, columns: Option<&[&str]>) -> usize {
    let mut widest = 0f64;
    for group in meta.row_groups() {
        let bytes: i64 = group
            .columns()
            .iter()
            .filter(|c| {
                columns.is_none_or(|names| {
                    c.column_path()
                        .parts()
                        .first()
                        .is_some_and(|root| names.contains(&root.as_str()))
                })
            })
            .map(|c| c.uncompressed_size())
            .sum();
        widest = widest.max(bytes as f64 / group.num_rows().max(1) as f64);
    }
    ((32u64 << 20) as f64 / widest.max(1.0)).clamp(1.0, 4096.0) as usize
}

/// The Arrow schema of a Parquet file.
pub fn parquet_schema(src: &Source) -> Result<arrow_schema::SchemaRef, CliError> {
    let file = open_unchanged(src)?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| parquet_error(src, e))?;
    Ok(builder.schema().clone())
}

fn is_string(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The type of a column's values: a dictionary column's (as pandas writes
/// a `category` column) or its own.
fn value_type(t: &DataType) -> &DataType {
    match t {
        DataType::Dictionary(_, values) => values,
        t => t,
    }
}

/// A dictionary column decoded to its values (one array of the value type,
/// row for row); any other column as it is.
fn plain(col: ArrayRef) -> Result<ArrayRef, arrow_schema::ArrowError> {
    match col.as_any_dictionary_opt() {
        Some(dict) => arrow_select::take::take(dict.values().as_ref(), dict.keys(), None),
        None => Ok(col),
    }
}

fn str_at(col: &ArrayRef, i: usize) -> Option<&str> {
    if col.is_null(i) {
        return None;
    }
    match col.data_type() {
        DataType::Utf8 => Some(col.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(col.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(col.as_string_view().value(i)),
        _ => None,
    }
}

/// A scalar of an id or key column as JSON: strings, integers, floats,
/// dates and timestamps (as a number of seconds, milliseconds, ... since the epoch).
fn value_at(col: &ArrayRef, i: usize) -> Value {
    if col.is_null(i) {
        return Value::Null;
    }
    macro_rules! prim {
        ($t:ty) => {
            Value::from(col.as_primitive::<$t>().value(i))
        };
    }
    match col.data_type() {
        t if is_string(t) => Value::String(str_at(col, i).unwrap_or_default().to_owned()),
        DataType::Int8 => prim!(Int8Type),
        DataType::Int16 => prim!(Int16Type),
        DataType::Int32 => prim!(Int32Type),
        DataType::Int64 => prim!(Int64Type),
        DataType::UInt8 => prim!(UInt8Type),
        DataType::UInt16 => prim!(UInt16Type),
        DataType::UInt32 => prim!(UInt32Type),
        DataType::UInt64 => prim!(UInt64Type),
        DataType::Float32 => prim!(Float32Type),
        DataType::Float64 => prim!(Float64Type),
        DataType::Date32 => prim!(Date32Type),
        DataType::Date64 => prim!(Date64Type),
        DataType::Timestamp(TimeUnit::Second, _) => prim!(TimestampSecondType),
        DataType::Timestamp(TimeUnit::Millisecond, _) => prim!(TimestampMillisecondType),
        DataType::Timestamp(TimeUnit::Microsecond, _) => prim!(TimestampMicrosecondType),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => prim!(TimestampNanosecondType),
        _ => Value::Null,
    }
}

fn scalar_ok(t: &DataType) -> bool {
    is_string(t)
        || t.is_integer()
        || t.is_floating()
        || matches!(
            t,
            DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _)
        )
}

/// Checks that a Parquet file has the fields asked for, with usable types.
fn check_parquet_schema(src: &Source, fields: &Fields) -> Result<(), CliError> {
    let schema = parquet_schema(src)?;
    let check = |name: &str, role: &str, ok: &dyn Fn(&DataType) -> bool, want: &str| match schema
        .field_with_name(name)
    {
        Err(_) => Err(CliError::Input(format!(
            "{}, record 1: the schema has no column `{name}` ({role}); its columns: {}",
            src.name,
            schema
                .fields()
                .iter()
                .map(|f| f.name().as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        Ok(f) if !ok(value_type(f.data_type())) => Err(CliError::Input(format!(
            "{}, record 1: column `{name}` ({role}) is of type {}, expected {want}",
            src.name,
            f.data_type()
        ))),
        Ok(_) => Ok(()),
    };
    check(&fields.text, "the text field", &is_string, "a string")?;
    if let Some(id) = &fields.id {
        check(
            id,
            "the id field",
            &|t| is_string(t) || t.is_integer(),
            "a string or an integer",
        )?;
    }
    if let Some(key) = &fields.key {
        check(
            key,
            "the --keep field",
            &scalar_ok,
            "a string, number, date or timestamp",
        )?;
    }
    Ok(())
}

fn scan_parquet(
    src: &Source,
    fields: &Fields,
    counter: &Counter,
    want: &mut dyn FnMut(u64) -> bool,
    f: &mut dyn FnMut(Rec<'_>) -> Result<(), CliError>,
) -> Result<(), CliError> {
    check_parquet_schema(src, fields)?;
    let mut names: Vec<&str> = vec![&fields.text];
    names.extend(fields.id.as_deref());
    names.extend(fields.key.as_deref());
    for_each_batch(src, Some(&names), counter, &mut |batch, first| {
        let col = |name: &str| -> Result<Option<ArrayRef>, CliError> {
            batch
                .column_by_name(name)
                .cloned()
                .map(plain)
                .transpose()
                .map_err(|e| bad(src, "record", first + 1, format!("column `{name}`: {e}")))
        };
        let text = col(&fields.text)?;
        let id = match fields.id.as_deref() {
            Some(name) => col(name)?,
            None => None,
        };
        let key = match fields.key.as_deref() {
            Some(name) => col(name)?,
            None => None,
        };
        let Some(text) = text else {
            return Err(bad(src, "record", first + 1, "the text column is missing"));
        };
        for row in 0..batch.num_rows() {
            let index = first + row as u64;
            let rec = if want(index) {
                let Some(t) = str_at(&text, row) else {
                    return Err(bad(
                        src,
                        "record",
                        index + 1,
                        format!("field `{}` is null, not a string", fields.text),
                    ));
                };
                if t.len() > MAX_RECORD_BYTES {
                    return Err(bad(
                        src,
                        "record",
                        index + 1,
                        format!(
                            "the text is longer than the limit of {} MiB per record",
                            MAX_RECORD_BYTES >> 20
                        ),
                    ));
                }
                let id = match (&id, &fields.id) {
                    (Some(c), Some(name)) => match value_at(c, row) {
                        Value::Null => {
                            return Err(bad(src, "record", index + 1, "the id field is null"));
                        }
                        v => Some(check_id(name, v).map_err(|m| bad(src, "record", index + 1, m))?),
                    },
                    _ => None,
                };
                Rec {
                    index,
                    text: Cow::Borrowed(t),
                    id,
                    key: key.as_ref().map(|c| value_at(c, row)),
                    raw: Raw::Row,
                }
            } else {
                Rec {
                    index,
                    text: Cow::Borrowed(""),
                    id: None,
                    key: None,
                    raw: Raw::Row,
                }
            };
            f(rec)?;
        }
        Ok(())
    })
}
