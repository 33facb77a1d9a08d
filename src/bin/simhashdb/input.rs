//! Reading inputs and opening outputs, where `-` means standard input/output.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

use crate::error::CliError;

/// Human name of an input or output argument.
pub fn display_name(arg: &str, stdio: &str) -> String {
    if arg == "-" {
        stdio.to_string()
    } else {
        arg.to_string()
    }
}

/// Reads a whole input: a file, or standard input for `-`.
pub fn read_all(arg: &str) -> Result<Vec<u8>, CliError> {
    let mut data = Vec::new();
    let result = if arg == "-" {
        io::stdin().lock().read_to_end(&mut data)
    } else {
        File::open(Path::new(arg)).and_then(|mut f| f.read_to_end(&mut data))
    };
    result.map_err(|e| CliError::read(&display_name(arg, "standard input"), e))?;
    Ok(data)
}

/// Opens an output: a file (created or truncated now), or standard output for `-`.
/// Call it only once the whole result is known, so bad input leaves no file behind.
pub fn open_output(arg: &str) -> Result<Box<dyn Write>, CliError> {
    if arg == "-" {
        Ok(Box::new(BufWriter::new(io::stdout().lock())))
    } else {
        let file = File::create(arg).map_err(|e| CliError::write(arg, e))?;
        Ok(Box::new(BufWriter::new(file)))
    }
}

/// The lines of `data`: split on `\n`, without a final empty line after a
/// trailing newline, each without a trailing `\r`. Empty input has no
/// lines; `"\n"` has one, empty.
pub fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let pieces = if data.is_empty() {
        None
    } else {
        let data = data.strip_suffix(b"\n").unwrap_or(data);
        Some(data.split(|&b| b == b'\n'))
    };
    pieces
        .into_iter()
        .flatten()
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
}

/// Parses newline-separated decimal u64 values. Surrounding spaces and tabs
/// are allowed; anything else (an empty line, a sign, a non-digit, a value
/// above `u64::MAX`, binary data) is an error naming the line.
pub fn parse_fingerprints(data: &[u8], source: &str) -> Result<Vec<u64>, CliError> {
    let mut out = Vec::with_capacity(data.len() / 20);
    for (n, line) in lines(data).enumerate() {
        match parse_decimal_u64(line) {
            Ok(v) => out.push(v),
            Err(why) => {
                return Err(CliError::Input(format!(
                    "{source}, line {}: {why}: {}",
                    n + 1,
                    snippet(line)
                )));
            }
        }
    }
    Ok(out)
}

pub fn parse_decimal_u64(line: &[u8]) -> Result<u64, &'static str> {
    let digits = line.trim_ascii_matches();
    if digits.is_empty() {
        return Err("empty line, expected a decimal unsigned 64-bit integer");
    }
    let mut value: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return Err("not a decimal unsigned 64-bit integer");
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or("value exceeds 18446744073709551615 (u64::MAX)")?;
    }
    Ok(value)
}

trait TrimSpaces {
    fn trim_ascii_matches(&self) -> &[u8];
}

impl TrimSpaces for [u8] {
    fn trim_ascii_matches(&self) -> &[u8] {
        let is_space = |b: &u8| *b == b' ' || *b == b'\t';
        let start = self.iter().position(|b| !is_space(b)).unwrap_or(self.len());
        let end = self
            .iter()
            .rposition(|b| !is_space(b))
            .map_or(start, |e| e + 1);
        &self[start..end]
    }
}

/// A name as one field of tab-separated output: a backslash, tab, newline
/// or carriage return in it is written `\\`, `\t`, `\n` or `\r`, so that
/// every record stays on one line with its fields apart.
pub fn escape_field(name: &str) -> std::borrow::Cow<'_, str> {
    if !name.contains(['\\', '\t', '\n', '\r']) {
        return std::borrow::Cow::Borrowed(name);
    }
    let mut out = String::with_capacity(name.len() + 8);
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A short, printable rendering of an input line for error messages.
pub fn snippet(line: &[u8]) -> String {
    const MAX: usize = 40;
    let shown: String = line[..line.len().min(MAX)].escape_ascii().to_string();
    if line.len() > MAX {
        format!("\"{shown}...\" ({} bytes)", line.len())
    } else {
        format!("\"{shown}\"")
    }
}

/// Longest accepted input line of a document stream (`NAME<TAB>TEXT`,
/// `ID<TAB>FP`): 16 MiB. Longer lines are refused rather than buffered.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Where an input line came from, for error messages.
pub fn line_error(source: &str, n: usize, why: impl std::fmt::Display) -> CliError {
    CliError::Input(format!("{source}, line {n}: {why}"))
}

/// Checks that `data` is a complete stream of lines: a non-empty input that
/// does not end with a newline was cut off (a writer died mid-line), and its
/// last line is refused rather than stored half.
pub fn check_complete(data: &[u8], source: &str) -> Result<(), CliError> {
    if data.is_empty() || data.ends_with(b"\n") {
        return Ok(());
    }
    let n = lines(data).count();
    Err(line_error(
        source,
        n,
        "truncated: the input ends without a newline after this line",
    ))
}

/// A `NAME<TAB>TEXT` line: UTF-8 without NUL bytes, a non-empty name of at
/// most `MAX_NAME_LEN` bytes before the first tab, and the text after it.
pub fn parse_named_text<'a>(
    line: &'a [u8],
    source: &str,
    n: usize,
) -> Result<(&'a str, &'a str), CliError> {
    let line = text_line(line, source, n)?;
    let (name, text) = line.split_once('\t').ok_or_else(|| {
        line_error(
            source,
            n,
            format!(
                "expected NAME<TAB>TEXT, found no tab: {}",
                snippet(line.as_bytes())
            ),
        )
    })?;
    check_name(name, source, n)?;
    Ok((name, text))
}

/// An `ID<TAB>FP[<TAB>NAME]` line: decimal u64 id and fingerprint, and an
/// optional name.
pub fn parse_id_fingerprint(
    line: &[u8],
    source: &str,
    n: usize,
) -> Result<(u64, u64, Option<String>), CliError> {
    let line = text_line(line, source, n)?;
    let mut fields = line.splitn(3, '\t');
    let mut number = |what: &str| {
        let field = fields.next().unwrap_or("");
        parse_decimal_u64(field.as_bytes()).map_err(|why| {
            line_error(
                source,
                n,
                format!(
                    "{what}: {why} (expected ID<TAB>FP[<TAB>NAME]): {}",
                    snippet(line.as_bytes())
                ),
            )
        })
    };
    let id = number("document id")?;
    let fp = number("fingerprint")?;
    let name = fields.next().map(str::to_owned);
    if let Some(name) = &name {
        check_name(name, source, n)?;
    }
    Ok((id, fp, name))
}

/// A line that must be text: not too long, UTF-8, no NUL bytes.
fn text_line<'a>(line: &'a [u8], source: &str, n: usize) -> Result<&'a str, CliError> {
    if line.len() > MAX_LINE_BYTES {
        return Err(line_error(
            source,
            n,
            format!(
                "line of {} bytes is longer than the limit of {MAX_LINE_BYTES} bytes",
                line.len()
            ),
        ));
    }
    let text = std::str::from_utf8(line).map_err(|e| {
        line_error(
            source,
            n,
            format!(
                "binary data (not UTF-8 at byte {}): {}",
                e.valid_up_to(),
                snippet(line)
            ),
        )
    })?;
    if let Some(at) = line.iter().position(|&b| b == 0) {
        return Err(line_error(
            source,
            n,
            format!("binary data (a NUL byte at byte {at}): {}", snippet(line)),
        ));
    }
    Ok(text)
}

fn check_name(name: &str, source: &str, n: usize) -> Result<(), CliError> {
    if name.is_empty() {
        return Err(line_error(source, n, "empty document name"));
    }
    if name.len() > simhashdb::format::MAX_NAME_LEN {
        return Err(line_error(
            source,
            n,
            format!(
                "document name of {} bytes is longer than the limit of {} bytes",
                name.len(),
                simhashdb::format::MAX_NAME_LEN
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_values_and_names_bad_lines() {
        assert_eq!(
            parse_fingerprints(b"1\n 2 \r\n18446744073709551615\n", "in").unwrap(),
            vec![1, 2, u64::MAX]
        );
        assert_eq!(parse_fingerprints(b"", "in").unwrap(), Vec::<u64>::new());
        assert_eq!(parse_fingerprints(b"7", "in").unwrap(), vec![7]);
        let err = |data: &[u8]| parse_fingerprints(data, "in").unwrap_err().to_string();
        assert!(err(b"1\n\n2\n").starts_with("in, line 2: empty line"));
        assert!(err(b"1\n2\n18446744073709551616\n").starts_with("in, line 3: value exceeds"));
        assert!(err(b"-1\n").starts_with("in, line 1: not a decimal"));
        assert!(err(b"1\n\x00\xff\x01\n").contains(r#""\x00\xff\x01""#));
        assert!(err(b"0x10\n").contains("line 1"));
        assert!(err(&[b'9'; 100]).contains("(100 bytes)"));
    }

    #[test]
    fn named_text_and_id_lines_are_checked() {
        assert_eq!(
            parse_named_text(b"a\tsome\ttext", "in", 1).unwrap(),
            ("a", "some\ttext")
        );
        let err = |line: &[u8]| parse_named_text(line, "in", 7).unwrap_err().to_string();
        assert!(err(b"no tab here").starts_with("in, line 7: expected NAME<TAB>TEXT"));
        assert!(err(b"\ttext").contains("empty document name"));
        assert!(err(b"a\t\xff\xfe").contains("binary data (not UTF-8 at byte 2)"));
        assert!(err(b"a\tx\x00y").contains("NUL byte at byte 3"));
        assert!(err(&vec![b'x'; MAX_LINE_BYTES + 1]).contains("longer than the limit"));
        assert_eq!(
            parse_id_fingerprint(b"5\t42", "in", 1).unwrap(),
            (5, 42, None)
        );
        assert_eq!(
            parse_id_fingerprint(b"5\t42\tname", "in", 1).unwrap(),
            (5, 42, Some("name".to_string()))
        );
        let err = |line: &[u8]| parse_id_fingerprint(line, "in", 3).unwrap_err().to_string();
        assert!(err(b"5").contains("line 3: fingerprint: empty"));
        assert!(err(b"x\t5").contains("document id: not a decimal"));
        assert!(err(b"5\t18446744073709551616").contains("exceeds"));
    }

    #[test]
    fn a_lone_newline_is_one_empty_line() {
        assert_eq!(lines(b"").count(), 0);
        assert_eq!(lines(b"\n").collect::<Vec<_>>(), [&b""[..]]);
        assert_eq!(lines(b"a\n\n").collect::<Vec<_>>(), [&b"a"[..], b""]);
        assert!(parse_fingerprints(b"\n", "in").is_err());
    }

    #[test]
    fn names_with_tabs_and_newlines_are_escaped_in_fields() {
        assert_eq!(escape_field("plain/name.txt"), "plain/name.txt");
        assert_eq!(escape_field("a\tb\nc\rd\\e"), "a\\tb\\nc\\rd\\\\e");
    }

    #[test]
    fn an_input_without_a_final_newline_is_truncated() {
        assert!(check_complete(b"", "in").is_ok());
        assert!(check_complete(b"a\tb\n", "in").is_ok());
        let e = check_complete(b"a\tb\nc\td", "in").unwrap_err().to_string();
        assert!(e.starts_with("in, line 2: truncated"), "{e}");
    }
}
