//! Reading the corpus: files and directories, `.gz`, gettext catalogs and man pages.

use std::io::Read;
use std::path::{Path, PathBuf};

use simhashdb::fingerprint::{fmix64, fnv1a64};

pub(crate) struct Doc {
    pub(crate) path: String,
    pub(crate) text: String,
}

pub(crate) fn path_key(p: &Path) -> u64 {
    fmix64(fnv1a64(p.to_string_lossy().as_bytes()))
}

pub(crate) fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

/// Files of each argument (a directory is sampled down to `cap` files).
pub(crate) fn list_files(paths: &[PathBuf], cap: usize) -> (Vec<PathBuf>, Vec<String>) {
    let mut files = Vec::new();
    let mut notes = Vec::new();
    let mut singles = 0;
    for p in paths {
        if p.is_dir() {
            let mut all = Vec::new();
            walk(p, &mut all);
            let total = all.len();
            all.sort_by_key(|f| path_key(f));
            all.truncate(cap);
            notes.push(format!(
                "`{}`: {} of {} files",
                p.display(),
                all.len(),
                total
            ));
            files.extend(all);
        } else {
            singles += 1;
            files.push(p.clone());
        }
    }
    if singles > 0 {
        notes.push(format!("{singles} files named one by one"));
    }
    files.sort();
    files.dedup();
    (files, notes)
}

pub(crate) fn read_doc(path: &Path, max_bytes: usize) -> Option<String> {
    let raw = std::fs::read(path).ok()?;
    if path.extension().is_some_and(|e| e == "mo") {
        return mo_translations(&raw);
    }
    let bytes = if path.extension().is_some_and(|e| e == "gz") {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .ok()?;
        out
    } else {
        raw
    };
    let mut text = String::from_utf8(bytes).ok()?;
    let is_man = path.components().any(|c| {
        c.as_os_str().to_str().is_some_and(|s| {
            s == "man" || (s.starts_with("man") && s[3..].starts_with(|c: char| c.is_ascii_digit()))
        })
    });
    if is_man {
        text = strip_troff(&text);
    }
    if text.len() > max_bytes {
        let mut cut = max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
    }
    Some(text)
}

/// The translated messages of a GNU gettext catalog (`.mo`), one paragraph
/// each.
pub(crate) fn mo_translations(raw: &[u8]) -> Option<String> {
    let word = |at: usize, le: bool| -> Option<usize> {
        let b: [u8; 4] = raw.get(at..at + 4)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        } as usize)
    };
    let le = match word(0, true)? {
        0x9504_12de => true,
        0xde12_0495 => false,
        _ => return None,
    };
    let (n, table) = (word(8, le)?, word(16, le)?);
    let mut out = String::new();
    for i in 0..n {
        let (len, off) = (word(table + 8 * i, le)?, word(table + 8 * i + 4, le)?);
        let msg = std::str::from_utf8(raw.get(off..off + len)?).ok()?;
        // Plural forms are separated by NUL; keep the first. Skip the header.
        let msg = msg.split('\0').next().unwrap_or("");
        if !msg.is_empty() && !msg.starts_with("Project-Id-Version") {
            out.push_str(msg);
            out.push_str("\n\n");
        }
    }
    Some(out)
}

/// Removes troff comments, request names and font/escape sequences, keeping
/// the words.
pub(crate) fn strip_troff(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let line = line.trim_end();
        if line.starts_with(".\\\"") || line.starts_with("'\\\"") || line == "." {
            continue;
        }
        let body = if let Some(rest) = line.strip_prefix('.').or_else(|| line.strip_prefix('\'')) {
            // Drop the request name, keep its arguments.
            match rest.split_once(char::is_whitespace) {
                Some((_, args)) => args.replace('"', ""),
                None => {
                    // A paragraph request: a paragraph break.
                    out.push('\n');
                    continue;
                }
            }
        } else {
            line.to_owned()
        };
        let mut chars = body.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('f') => {
                    // \fB, \f(CW, \f[...]
                    match chars.next() {
                        Some('(') => {
                            chars.next();
                            chars.next();
                        }
                        Some('[') => {
                            for c in chars.by_ref() {
                                if c == ']' {
                                    break;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                Some('(') => {
                    let a = chars.next();
                    let b = chars.next();
                    out.push_str(match (a, b) {
                        (Some('e'), Some('m')) | (Some('e'), Some('n')) => "-",
                        (Some('b'), Some('u')) => "*",
                        _ => " ",
                    });
                }
                Some('-') => out.push('-'),
                Some('e') | Some('\\') => out.push('\\'),
                Some('&') | Some('c') | Some('%') => {}
                Some(' ') => out.push(' '),
                Some('*') => {
                    if chars.next() == Some('(') {
                        chars.next();
                        chars.next();
                    }
                }
                Some(_) | None => {}
            }
        }
        out.push('\n');
    }
    out
}

pub(crate) fn load(paths: &[PathBuf], cap: usize, max_bytes: usize) -> (Vec<Doc>, Vec<String>) {
    let (files, mut notes) = list_files(paths, cap);
    let mut docs = Vec::new();
    let mut unreadable = 0;
    for f in files {
        match read_doc(&f, max_bytes) {
            Some(text) if !text.trim().is_empty() => docs.push(Doc {
                path: f.display().to_string(),
                text,
            }),
            _ => unreadable += 1,
        }
    }
    if unreadable > 0 {
        notes.push(format!(
            "{unreadable} files skipped (empty, unreadable or not UTF-8)"
        ));
    }
    (docs, notes)
}
