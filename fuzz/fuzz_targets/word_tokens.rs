//! Word tokens (`src/fingerprint/tokenize.rs`): for any text, the default
//! hasher's tokens are the text's `unicode_words`, lower-cased. The ASCII
//! segmenter, and the cutting of other text where white space starts, must
//! change nothing.

#![no_main]

use libfuzzer_sys::fuzz_target;
use simhashdb::Simhasher;
use unicode_segmentation::UnicodeSegmentation;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let want: Vec<String> = text.unicode_words().map(str::to_lowercase).collect();
    assert_eq!(Simhasher::default().tokens(&text), want, "{text:?}");
});
