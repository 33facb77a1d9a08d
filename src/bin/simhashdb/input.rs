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
/// trailing newline, each without a trailing `\r`.
pub fn lines(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    let data = data.strip_suffix(b"\n").unwrap_or(data);
    let pieces = if data.is_empty() {
        None
    } else {
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

fn parse_decimal_u64(line: &[u8]) -> Result<u64, &'static str> {
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

/// A short, printable rendering of an input line for error messages.
fn snippet(line: &[u8]) -> String {
    const MAX: usize = 40;
    let shown: String = line[..line.len().min(MAX)].escape_ascii().to_string();
    if line.len() > MAX {
        format!("\"{shown}...\" ({} bytes)", line.len())
    } else {
        format!("\"{shown}\"")
    }
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
}
