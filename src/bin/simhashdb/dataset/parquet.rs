//! Parquet inputs and outputs of `dedup` (the `parquet` feature): the
//! record batches of a Parquet file, its records as `read::scan` hands them
//! over, and a Parquet output with the input's schema. A build without the
//! feature refuses Parquet files before anything is written
//! (`read::check_supported`).

use std::borrow::Cow;
use std::fmt;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Date64Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Schema, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use serde_json::Value;

use super::read::{
    Counter, Fields, MAX_RECORD_BYTES, Raw, Rec, Source, bad, check_id, open_unchanged,
};
use super::write::Pending;
use crate::error::CliError;

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
pub fn schema(src: &Source) -> Result<arrow_schema::SchemaRef, CliError> {
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
fn check_schema(src: &Source, fields: &Fields) -> Result<(), CliError> {
    let schema = schema(src)?;
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

pub fn scan(
    src: &Source,
    fields: &Fields,
    counter: &Counter,
    want: &mut dyn FnMut(u64) -> bool,
    f: &mut dyn FnMut(Rec<'_>) -> Result<(), CliError>,
) -> Result<(), CliError> {
    check_schema(src, fields)?;
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
