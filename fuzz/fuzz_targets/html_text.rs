//! The CLI's HTML path (`src/bin/simhashdb/html.rs`, compiled in here from
//! the binary's source): any bytes, read as a page, give visible text without
//! a panic, in time linear in the input (libFuzzer's `-timeout` catches a
//! slow input), at any nesting depth. The title and headings are a part of
//! the text: their non-space characters are a subsequence of the text's.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../src/bin/simhashdb/html.rs"]
#[allow(dead_code)]
mod html;

fn check(page: &str) {
    let text = html::visible_text(page);
    let mut body = text.text.chars().filter(|c| !c.is_whitespace());
    for c in text.headings.chars().filter(|c| !c.is_whitespace()) {
        assert!(body.any(|b| b == c), "heading text missing from the text");
    }
}

fuzz_target!(|data: &[u8]| {
    let page = String::from_utf8_lossy(data);
    check(&page);
    // The same bytes deep inside a nest of elements.
    if let Some((&first, rest)) = data.split_first() {
        let depth = usize::from(first) * 4;
        let rest = String::from_utf8_lossy(rest);
        check(&format!("{}{rest}{}", "<div><b>".repeat(depth), "</b></div>".repeat(depth)));
    }
});
