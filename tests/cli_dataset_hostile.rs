//! `simhashdb dedup` on datasets given hostile or careless inputs (docs/RELIABILITY.md,
//! "Datasets, hostile II"): pipes given by path, huge records in small compressed files,
//! signals, late failures, duplicate ids for `--add-to`, byte order marks, dictionary
//! columns, stray CSV quotes, ids that are not ids, pandas' Parquet metadata and distances
//! no plan can search. Each runs the real binary on real files; each refusal must exit 2,
//! name the file and the record or line, and leave nothing behind.
#![cfg(all(feature = "cli", unix))]

mod common;

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
#[cfg(feature = "parquet")]
use std::sync::Arc;

#[cfg(feature = "parquet")]
use arrow_array::types::Int32Type;
#[cfg(feature = "parquet")]
use arrow_array::{ArrayRef, DictionaryArray, Float64Array, Int64Array, RecordBatch, StringArray};
#[cfg(feature = "parquet")]
use arrow_schema::Schema;
use serde_json::{Value, json};
use simhashdb::{Index, Options};

use common::Rng;

fn simhashdb() -> Command {
    Command::new(env!("CARGO_BIN_EXE_simhashdb"))
}

fn dedup(args: &[&str]) -> Output {
    simhashdb().arg("dedup").args(args).output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Checks that `out` is a refusal (exit code 2) whose message holds every
/// one of `names`.
fn assert_refused(out: &Output, names: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for name in names {
        assert!(err.contains(name), "`{name}` not in: {err}");
    }
}

/// `count` records with ids `r0`, `r1`, ...: unrelated texts, and every
/// fifth one a near copy (one word changed) of an earlier one.
fn records(seed: u64, count: usize) -> Vec<(String, String)> {
    let mut rng = Rng(seed);
    let mut texts: Vec<Vec<String>> = Vec::new();
    for i in 0..count {
        if i % 5 == 4 {
            let mut copy = texts[rng.index(texts.len())].clone();
            let at = rng.index(copy.len());
            copy[at] = format!("changed{}", rng.next() % 1000);
            texts.push(copy);
        } else {
            texts.push((0..60).map(|_| format!("w{}", rng.next() % 5000)).collect());
        }
    }
    texts
        .into_iter()
        .enumerate()
        .map(|(i, words)| (format!("r{i}"), words.join(" ")))
        .collect()
}

fn jsonl(recs: &[(String, String)]) -> String {
    recs.iter()
        .map(|(id, text)| json!({"id": id, "text": text}).to_string() + "\n")
        .collect()
}

/// The ids of a JSONL output.
fn jsonl_ids(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// The kept ids of `dedup FILE --id-field id --emit drop` read as the
/// complement of the dropped ones, in input order.
fn kept_ids(input: &Path, recs: &[(String, String)], extra: &[&str]) -> Vec<String> {
    let mut args = vec![path_str(input), "--id-field", "id", "--emit", "drop"];
    args.extend_from_slice(extra);
    let out = dedup(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let dropped = jsonl_ids(&out.stdout);
    recs.iter()
        .map(|(id, _)| id.clone())
        .filter(|id| !dropped.contains(id))
        .collect()
}

#[test]
fn pipes_given_by_path_are_refused_like_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let recs = records(1, 50);
    let file = d.join("docs.jsonl");
    fs::write(&file, jsonl(&recs)).unwrap();
    // A FIFO with a dataset's name: refused before it is opened (opening it
    // would wait for a writer).
    let fifo = d.join("fifo.jsonl");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let out = d.join("out.jsonl");
    let before = listing(d);
    for extra in [&[][..], &["--no-verify"][..]] {
        let mut args = vec![path_str(&fifo), "-o", path_str(&out)];
        args.extend_from_slice(extra);
        let result = dedup(&args);
        assert_refused(&result, &["fifo.jsonl", "not a regular file"]);
        assert_eq!(listing(d), before, "nothing is written");
    }
    // A process substitution (/dev/fd/N), as a shell passes `<(cat docs.jsonl)`.
    let script = format!(
        "exec {} dedup --format jsonl --no-verify -o {} <(cat {})",
        env!("CARGO_BIN_EXE_simhashdb"),
        path_str(&out),
        path_str(&file)
    );
    let result = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap();
    assert_refused(&result, &["/dev/fd/", "not a regular file"]);
    assert_eq!(listing(d), before, "nothing is written");
}

#[test]
fn add_to_refuses_two_kept_records_with_one_id_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut recs = records(2, 30);
    // Records 4 and 21 (1-based) share an id and are both kept (unrelated texts).
    recs[20].0 = recs[3].0.clone();
    let input = d.join("docs.jsonl");
    fs::write(&input, jsonl(&recs)).unwrap();
    let db = d.join("db");
    let out = d.join("out.jsonl");
    let before = listing(d);
    let result = dedup(&[
        path_str(&input),
        "--id-field",
        "id",
        "--add-to",
        path_str(&db),
        "-o",
        path_str(&out),
    ]);
    assert_refused(
        &result,
        &["docs.jsonl, record 4", "docs.jsonl, record 21", "\"r3\""],
    );
    assert_eq!(listing(d), before, "no output, no index");

    // A shared id whose second record is dropped as a near copy of the first
    // is no conflict: only the survivor is stored.
    let mut recs = records(3, 10);
    recs[4].0 = recs[recs.len() - 1].0.clone();
    let copy = (recs[4].0.clone(), recs[4].1.clone() + " tail");
    recs.push(copy);
    fs::write(&input, jsonl(&recs)).unwrap();
    let result = dedup(&[
        path_str(&input),
        "--id-field",
        "id",
        "--add-to",
        path_str(&db),
        "-o",
        path_str(&out),
    ]);
    assert!(result.status.success(), "{}", stderr(&result));
    let kept = jsonl_ids(&fs::read(&out).unwrap());
    let mut unique = kept.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), kept.len(), "kept ids are distinct: {kept:?}");
    let index = Index::open_read_only(&db).unwrap();
    assert_eq!(index.len().unwrap() as usize, kept.len());
}

/// Writes `{"id": "big", "text": "a a a ..."}` with a text of `text_bytes`
/// bytes, zstd-compressed, after one ordinary record.
fn write_huge_jsonl_zst(path: &Path, text_bytes: usize) {
    let file = fs::File::create(path).unwrap();
    let mut z = zstd::Encoder::new(file, 3).unwrap();
    z.write_all(
        b"{\"id\": \"small\", \"text\": \"an ordinary record\"}\n{\"id\": \"big\", \"text\": \"",
    )
    .unwrap();
    let block = "a ".repeat(1 << 19);
    for _ in 0..text_bytes / block.len() {
        z.write_all(block.as_bytes()).unwrap();
    }
    z.write_all(b"\"}\n").unwrap();
    z.finish().unwrap();
}

/// Runs `dedup args` with its address space limited to `mib` MiB.
fn dedup_within(mib: u64, args: &[&str]) -> Output {
    let mut script = format!(
        "ulimit -v {} && exec {} dedup",
        mib << 10,
        env!("CARGO_BIN_EXE_simhashdb")
    );
    for a in args {
        script.push_str(&format!(" '{a}'"));
    }
    Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .unwrap()
}

#[test]
fn a_record_over_the_limit_is_refused_naming_it_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // One 1 GiB line in a file of a few hundred KB: read as it was, it takes
    // gigabytes; within 1.5 GiB of address space, the refusal must come first.
    let big = d.join("bomb.jsonl.zst");
    write_huge_jsonl_zst(&big, 1 << 30);
    assert!(fs::metadata(&big).unwrap().len() < 4 << 20);
    let out = d.join("out.jsonl");
    let before = listing(d);
    let result = dedup_within(1536, &[path_str(&big), "-o", path_str(&out)]);
    assert_refused(&result, &["bomb.jsonl.zst, line 2", "64 MiB"]);
    assert_eq!(listing(d), before);

    // The same in a CSV record (a quoted field with line breaks), gzip.
    let csv = d.join("bomb.csv.gz");
    {
        let mut gz = flate2::write::GzEncoder::new(
            fs::File::create(&csv).unwrap(),
            flate2::Compression::fast(),
        );
        gz.write_all(b"id,text\n1,ordinary\n2,\"").unwrap();
        let block = "b b\n".repeat(1 << 18);
        for _ in 0..(100 << 20) / block.len() {
            gz.write_all(block.as_bytes()).unwrap();
        }
        gz.write_all(b"\"\n").unwrap();
        gz.finish().unwrap();
    }
    let out = d.join("out.csv");
    let before = listing(d);
    let result = dedup_within(1536, &[path_str(&csv), "-o", path_str(&out)]);
    assert_refused(&result, &["bomb.csv.gz, line 3", "64 MiB"]);
    assert_eq!(listing(d), before);

    // A Parquet row whose text is over the limit.
    #[cfg(feature = "parquet")]
    {
        let parquet = d.join("bomb.parquet");
        let texts = vec!["ordinary".to_string(), "c ".repeat(33 << 20)];
        write_parquet(&parquet, &["a", "b"], &texts, None);
        let out = d.join("out.parquet");
        let before = listing(d);
        let result = dedup(&[path_str(&parquet), "-o", path_str(&out)]);
        assert_refused(&result, &["bomb.parquet, record 2", "64 MiB"]);
        assert_eq!(listing(d), before);
    }
}

/// Writes a Parquet file of `ids` and `texts` (plain string columns), with
/// `metadata` as the schema's key-value metadata.
#[cfg(feature = "parquet")]
fn write_parquet(
    path: &Path,
    ids: &[&str],
    texts: &[String],
    metadata: Option<HashMap<String, String>>,
) {
    let id: ArrayRef = Arc::new(StringArray::from_iter_values(ids.iter()));
    let text: ArrayRef = Arc::new(StringArray::from_iter_values(texts.iter()));
    let batch = RecordBatch::try_from_iter([("id", id), ("text", text)]).unwrap();
    let schema = match metadata {
        Some(m) => Arc::new(Schema::new_with_metadata(
            batch.schema().fields().clone(),
            m,
        )),
        None => batch.schema(),
    };
    let batch = batch.with_schema(schema).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .build();
    common::write_parquet_batches(path, &[batch], Some(props));
}

fn large_input(d: &Path) -> PathBuf {
    let recs = records(4, 60_000);
    let input = d.join("docs.jsonl");
    fs::write(&input, jsonl(&recs)).unwrap();
    input
}

#[test]
fn an_interrupted_dedup_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = tempfile::tempdir().unwrap();
    let input = large_input(inputs.path());
    for signal in ["INT", "TERM"] {
        let out = dir.path().join("out.jsonl");
        let mut child = simhashdb()
            .args(["dedup", path_str(&input), "-o", path_str(&out)])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The output's temporary file exists from the start of the run.
        while !listing(dir.path())
            .iter()
            .any(|n| n.starts_with(".out.jsonl.tmp-"))
        {
            assert!(
                child.try_wait().unwrap().is_none(),
                "dedup ended before it was signalled"
            );
            std::thread::yield_now();
        }
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let status = child.wait().unwrap();
        assert!(status.signal().is_some(), "ended by the signal: {status:?}");
        assert_eq!(
            listing(dir.path()),
            Vec::<String>::new(),
            "after SIG{signal}"
        );
    }
}

#[test]
fn a_missing_output_directory_and_a_locked_index_are_found_before_any_record() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Record 3 is bad: a check made after reading would report it instead.
    let mut lines: Vec<String> = jsonl(&records(5, 10)).lines().map(str::to_owned).collect();
    lines[2] = "{\"id\": \"x\", \"text\": ".into();
    let input = d.join("docs.jsonl");
    fs::write(&input, lines.join("\n") + "\n").unwrap();

    let missing = d.join("no/such/dir/out.jsonl");
    let result = dedup(&[path_str(&input), "-o", path_str(&missing)]);
    assert_refused(&result, &["no/such/dir"]);
    assert!(!stderr(&result).contains("line 3"), "{}", stderr(&result));
    let stats = d.join("none/stats.json");
    let result = dedup(&[path_str(&input), "--stats-json", path_str(&stats)]);
    assert_refused(&result, &["none"]);
    assert!(!stderr(&result).contains("line 3"), "{}", stderr(&result));

    let db = d.join("db");
    let index = Index::open(&db, Options::default()).unwrap();
    let out = d.join("out.jsonl");
    let result = dedup(&[
        path_str(&input),
        "--id-field",
        "id",
        "--add-to",
        path_str(&db),
        "-o",
        path_str(&out),
    ]);
    let err = stderr(&result);
    assert_ne!(result.status.code(), Some(0), "{err}");
    assert!(err.contains("lock"), "{err}");
    assert!(!err.contains("line 3"), "{err}");
    assert!(!out.exists());
    drop(index);
}

#[test]
fn jsonl_with_a_byte_order_mark_gives_the_same_answer() {
    let dir = tempfile::tempdir().unwrap();
    let recs = records(6, 200);
    let plain = dir.path().join("plain.jsonl");
    let bom = dir.path().join("bom.jsonl");
    fs::write(&plain, jsonl(&recs)).unwrap();
    fs::write(
        &bom,
        [&b"\xEF\xBB\xBF"[..], jsonl(&recs).as_bytes()].concat(),
    )
    .unwrap();
    let want = kept_ids(&plain, &recs, &[]);
    assert!(want.len() < recs.len(), "the set has duplicates");
    assert_eq!(kept_ids(&bom, &recs, &[]), want);
}

#[cfg(feature = "parquet")]
#[test]
fn dictionary_string_columns_give_the_same_answer() {
    let dir = tempfile::tempdir().unwrap();
    let recs = records(7, 200);
    let plain = dir.path().join("plain.parquet");
    let ids: Vec<&str> = recs.iter().map(|(id, _)| id.as_str()).collect();
    let texts: Vec<String> = recs.iter().map(|(_, t)| t.clone()).collect();
    write_parquet(&plain, &ids, &texts, None);
    // pandas writes a `category` column as a dictionary.
    let dict = dir.path().join("dict.parquet");
    {
        let id: ArrayRef = Arc::new(ids.iter().copied().collect::<DictionaryArray<Int32Type>>());
        let text: ArrayRef = Arc::new(
            texts
                .iter()
                .map(String::as_str)
                .collect::<DictionaryArray<Int32Type>>(),
        );
        let batch = RecordBatch::try_from_iter([("id", id), ("text", text)]).unwrap();
        common::write_parquet_batches(&dict, &[batch], None);
    }
    let want = kept_ids(&plain, &recs, &[]);
    assert!(want.len() < recs.len(), "the set has duplicates");
    assert_eq!(kept_ids(&dict, &recs, &[]), want);
    let out = dir.path().join("kept.parquet");
    let result = dedup(&[path_str(&dict), "-o", path_str(&out)]);
    assert!(result.status.success(), "{}", stderr(&result));
}

#[test]
fn a_stray_csv_quote_is_an_error_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let recs = records(8, 1000);
    let csv_with = |stray_at: usize, field: &str| -> String {
        let mut s = String::from("id,text\n");
        for (i, (id, text)) in recs.iter().enumerate() {
            if i == stray_at {
                s.push_str(&format!("{id},{field}\n"));
            } else {
                s.push_str(&format!("{id},{text}\n"));
            }
        }
        s
    };
    let out = d.join("out.csv");
    // A quote that never closes: line 502 (the header is line 1).
    let p = d.join("open.csv");
    fs::write(&p, csv_with(500, "\"a quote that never closes")).unwrap();
    let before = listing(d);
    assert_refused(
        &dedup(&[path_str(&p), "-o", path_str(&out)]),
        &["open.csv, line 502", "never closed"],
    );
    assert_eq!(listing(d), before);
    // Two stray quotes: the records between them would be one field.
    let mut text = csv_with(300, "\"one stray quote");
    text = text.replacen(
        &format!("{},{}", recs[600].0, recs[600].1),
        &format!("{},and \"another", recs[600].0),
        1,
    );
    let p = d.join("two.csv");
    fs::write(&p, text).unwrap();
    let before = listing(d);
    assert_refused(
        &dedup(&[path_str(&p), "-o", path_str(&out)]),
        &["two.csv, line 602", "line 302"],
    );
    assert_eq!(listing(d), before);
    // Quoted fields done right (doubled quotes, delimiters and line breaks
    // inside) are read as they are.
    let p = d.join("good.csv");
    fs::write(
        &p,
        "id,text\n1,\"she said \"\"hello, world\"\"\nand left\"\n2,plain\n",
    )
    .unwrap();
    let result = dedup(&[path_str(&p), "-o", path_str(&out)]);
    assert!(result.status.success(), "{}", stderr(&result));
    assert_eq!(
        fs::read_to_string(&out).unwrap(),
        "id,text\n1,\"she said \"\"hello, world\"\"\nand left\"\n2,plain\n"
    );
}

#[test]
fn ids_follow_one_rule_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (n, bad) in ["1.5", "1e3", "-1", "18446744073709551616", "true", "null"]
        .iter()
        .enumerate()
    {
        let p = d.join(format!("bad{n}.jsonl"));
        fs::write(
            &p,
            format!("{{\"id\": 1, \"text\": \"a b c\"}}\n{{\"id\": {bad}, \"text\": \"d e f\"}}\n"),
        )
        .unwrap();
        let result = dedup(&[path_str(&p), "--id-field", "id", "--emit", "drop"]);
        assert_refused(&result, &[&format!("bad{n}.jsonl, line 2"), "id"]);
    }
    // The largest integer and a string are ids.
    let p = d.join("good.jsonl");
    fs::write(&p, "{\"id\": 18446744073709551615, \"text\": \"a b c\"}\n{\"id\": \"x\", \"text\": \"a b c\"}\n").unwrap();
    let result = dedup(&[path_str(&p), "--id-field", "id", "--emit", "drop"]);
    assert!(result.status.success(), "{}", stderr(&result));
    let drop: Value = serde_json::from_slice(&result.stdout).unwrap();
    assert_eq!(drop["id"], json!("x"));
    assert_eq!(drop["duplicate_of"], json!(18446744073709551615u64));
    // Parquet: a negative integer and a float column are refused.
    #[cfg(feature = "parquet")]
    {
        let p = d.join("negative.parquet");
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![1, -1]));
        let floats: ArrayRef = Arc::new(Float64Array::from(vec![1.0, 2.5]));
        let text: ArrayRef = Arc::new(StringArray::from(vec!["a b c", "d e f"]));
        for (p, id) in [(p, ints), (d.join("float.parquet"), floats)] {
            let batch = RecordBatch::try_from_iter([("id", id), ("text", text.clone())]).unwrap();
            common::write_parquet_batches(&p, &[batch], None);
            let result = dedup(&[path_str(&p), "--id-field", "id", "--emit", "drop"]);
            let name = p.file_name().unwrap().to_str().unwrap();
            assert_refused(&result, &[name, "id"]);
        }
    }
    // The rule is stated in the help.
    let help = simhashdb().args(["dedup", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("2^64"), "{help}");
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_with_pandas_metadata_is_deduplicated_with_emit_keep() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let recs = records(9, 300);
    let ids: Vec<&str> = recs.iter().map(|(id, _)| id.as_str()).collect();
    let texts: Vec<String> = recs.iter().map(|(_, t)| t.clone()).collect();
    let pandas = r#"{"index_columns": [{"kind": "range", "name": null, "start": 0, "stop": 300, "step": 1}], "column_indexes": [], "columns": [{"name": "id", "field_name": "id", "pandas_type": "unicode", "numpy_type": "object", "metadata": null}, {"name": "text", "field_name": "text", "pandas_type": "unicode", "numpy_type": "object", "metadata": null}], "creator": {"library": "pyarrow", "version": "17.0.0"}, "pandas_version": "2.2.2"}"#;
    let meta: HashMap<String, String> = [("pandas".to_string(), pandas.to_string())].into();
    let (a, b) = (d.join("a.parquet"), d.join("b.parquet"));
    write_parquet(&a, &ids[..150], &texts[..150], Some(meta.clone()));
    // The second shard without metadata (another writer): same columns.
    write_parquet(&b, &ids[150..], &texts[150..], None);
    let plain = d.join("plain.jsonl");
    fs::write(&plain, jsonl(&recs)).unwrap();
    let want = kept_ids(&plain, &recs, &[]);
    assert!(want.len() < recs.len(), "the set has duplicates");

    let out = d.join("clean.parquet");
    let result = dedup(&[path_str(&a), path_str(&b), "-o", path_str(&out)]);
    assert!(result.status.success(), "{}", stderr(&result));
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        fs::File::open(&out).unwrap(),
    )
    .unwrap();
    assert_eq!(
        reader.schema().metadata().get("pandas"),
        Some(&pandas.to_string())
    );
    let mut got = Vec::new();
    for batch in reader.build().unwrap() {
        let batch = batch.unwrap();
        let col = batch
            .column_by_name("id")
            .unwrap()
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        got.extend(col.iter().map(|v| v.unwrap().to_string()));
    }
    assert_eq!(got, want);

    // A shard with other columns is refused before any record is read,
    // here before the null text of a.parquet's record 2 is met.
    let c = d.join("c.parquet");
    {
        let id: ArrayRef = Arc::new(StringArray::from(vec!["z"]));
        let body: ArrayRef = Arc::new(StringArray::from(vec!["other"]));
        let batch = RecordBatch::try_from_iter([("id", id), ("body", body)]).unwrap();
        common::write_parquet_batches(&c, &[batch], None);
    }
    let nulls = d.join("nulls.parquet");
    {
        let id: ArrayRef = Arc::new(StringArray::from(vec!["p", "q"]));
        let text: ArrayRef = Arc::new(StringArray::from(vec![Some("some text"), None]));
        let batch = RecordBatch::try_from_iter([("id", id), ("text", text)]).unwrap();
        common::write_parquet_batches(&nulls, &[batch], None);
    }
    let before = listing(d);
    let out2 = d.join("clean2.parquet");
    let result = dedup(&[path_str(&nulls), path_str(&c), "-o", path_str(&out2)]);
    assert_refused(&result, &["c.parquet", "columns differ"]);
    assert_eq!(listing(d), before);
}

#[test]
fn distances_no_plan_can_search_are_refused_like_directory_mode() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("docs.jsonl");
    fs::write(&p, jsonl(&records(10, 20))).unwrap();
    for extra in [&[][..], &["--no-verify"][..]] {
        let mut args = vec![path_str(&p), "-d", "64"];
        args.extend_from_slice(extra);
        assert_refused(&dedup(&args), &["-d 64", "too large"]);
    }
    let txt = dir.path().join("a.txt");
    fs::write(&txt, "some words here\n").unwrap();
    assert_refused(&dedup(&[path_str(&txt), "-d", "64"]), &["too large"]);
}

#[test]
fn large_distances_give_the_brute_force_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let recs = records(11, 400);
    let p = dir.path().join("docs.jsonl");
    fs::write(&p, jsonl(&recs)).unwrap();
    let hasher = simhashdb::Simhasher::default();
    let fps: Vec<u64> = recs.iter().map(|(_, t)| hasher.fingerprint(t)).collect();
    for k in [12u32, 16, 32, 63] {
        let out = dedup(&[
            path_str(&p),
            "--id-field",
            "id",
            "--no-verify",
            "-d",
            &k.to_string(),
            "--emit",
            "groups",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let groups: Value = serde_json::from_slice(&out.stdout).unwrap();
        let in_groups: usize = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["members"].as_array().unwrap().len())
            .sum();
        // Union-find over the brute-force pairs.
        let mut parent: Vec<usize> = (0..fps.len()).collect();
        fn root(p: &mut [usize], mut x: usize) -> usize {
            while p[x] != x {
                x = p[x];
            }
            x
        }
        for i in 0..fps.len() {
            for j in i + 1..fps.len() {
                if (fps[i] ^ fps[j]).count_ones() <= k {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
        let mut sizes: HashMap<usize, usize> = HashMap::new();
        for i in 0..fps.len() {
            *sizes.entry(root(&mut parent, i)).or_default() += 1;
        }
        let want: usize = sizes.values().filter(|&&s| s > 1).sum();
        assert_eq!(in_groups, want, "k = {k}");
    }
}

#[test]
fn an_input_that_changes_between_passes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let inputs = tempfile::tempdir().unwrap();
    let input = large_input(inputs.path());
    let out = dir.path().join("out.jsonl");
    let mut child = simhashdb()
        .args(["dedup", path_str(&input), "-o", path_str(&out)])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Appended once the run has begun (its output exists from the start):
    // the passes after the first would read other records than it did.
    while !listing(dir.path())
        .iter()
        .any(|n| n.starts_with(".out.jsonl.tmp-"))
    {
        assert!(child.try_wait().unwrap().is_none(), "dedup ended too soon");
        std::thread::yield_now();
    }
    let mut f = fs::OpenOptions::new().append(true).open(&input).unwrap();
    f.write_all(jsonl(&records(12, 10)).as_bytes()).unwrap();
    drop(f);
    let result = child.wait_with_output().unwrap();
    let err = stderr(&result);
    assert_eq!(result.status.code(), Some(1), "{err}");
    assert!(
        err.contains("docs.jsonl") && err.contains("changed while"),
        "{err}"
    );
    assert_eq!(
        listing(dir.path()),
        Vec::<String>::new(),
        "nothing is written"
    );
}

#[test]
fn an_output_that_is_a_directory_is_refused_before_any_record() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut lines: Vec<String> = jsonl(&records(13, 10)).lines().map(str::to_owned).collect();
    lines[2] = "not json".into();
    let input = d.join("docs.jsonl");
    fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = d.join("out.jsonl");
    fs::create_dir(&out).unwrap();
    let before = listing(d);
    let result = dedup(&[path_str(&input), "-o", path_str(&out)]);
    assert_refused(&result, &["out.jsonl", "is a directory"]);
    assert!(!stderr(&result).contains("line 3"), "{}", stderr(&result));
    assert_eq!(listing(d), before);
}
