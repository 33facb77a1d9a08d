//! The CLI's line readers (`src/bin/simhashdb/input.rs`, compiled in here
//! from the binary's source): any input is split into lines, parsed as
//! fingerprints, `NAME<TAB>TEXT` or `ID<TAB>FP[<TAB>NAME]` lines, or refused
//! with an error naming a line, never a panic; what is accepted satisfies
//! the documented rules, and escaped names hold no tab or line break.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../src/bin/simhashdb/error.rs"]
#[allow(dead_code)]
mod error;
#[path = "../../src/bin/simhashdb/input.rs"]
#[allow(dead_code)]
mod input;

fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut chars = field.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            other => panic!("bad escape {other:?}"),
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let lines: Vec<&[u8]> = input::lines(data).collect();
    assert_eq!(lines.is_empty(), data.is_empty());
    let complete = input::check_complete(data, "in");
    assert_eq!(complete.is_ok(), data.is_empty() || data.ends_with(b"\n"));
    match input::parse_fingerprints(data, "in") {
        Ok(values) => assert_eq!(values.len(), lines.len()),
        Err(e) => assert!(e.to_string().starts_with("in, line "), "{e}"),
    }
    for (i, line) in lines.iter().enumerate() {
        assert!(!line.contains(&b'\n'));
        match input::parse_named_text(line, "in", i + 1) {
            Ok((name, text)) => {
                assert!(!name.is_empty() && !name.contains('\t'));
                assert!(name.len() <= simhashdb::format::MAX_NAME_LEN);
                assert_eq!(name.len() + 1 + text.len(), line.len());
                assert!(!text.contains('\0'));
                let escaped = input::escape_field(name);
                assert!(!escaped.contains(['\t', '\n', '\r']));
                assert_eq!(unescape(&escaped), name);
            }
            Err(e) => assert!(e.to_string().starts_with(&format!("in, line {}: ", i + 1))),
        }
        match input::parse_id_fingerprint(line, "in", i + 1) {
            Ok((id, fp, name)) => {
                // The numbers read back from their own decimal form.
                assert_eq!(input::parse_decimal_u64(id.to_string().as_bytes()), Ok(id));
                assert_eq!(input::parse_decimal_u64(fp.to_string().as_bytes()), Ok(fp));
                if let Some(name) = name {
                    assert!(!name.is_empty() && name.len() <= simhashdb::format::MAX_NAME_LEN);
                }
            }
            Err(e) => assert!(e.to_string().starts_with(&format!("in, line {}: ", i + 1))),
        }
    }
});
