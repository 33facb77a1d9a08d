//! Tokenizers: text → lower-cased tokens (or character n-grams).

use std::fmt;
use std::str::FromStr;

use unicode_segmentation::UnicodeSegmentation;

use super::FingerprintError;

/// How text is split into tokens.
///
/// Every tokenizer lower-cases its tokens (Unicode lower-casing from the
/// standard library) and applies no other normalisation (no NFC/NFKC folding,
/// no stemming, no stop words). Parsed from and displayed as `words`,
/// `letters`, `chinese` and `chars:N` (`chars` alone means `chars:3`).
///
/// ```
/// use simhashdb::fingerprint::Tokenizer;
/// assert_eq!("chars".parse::<Tokenizer>().unwrap(), Tokenizer::CharNgrams(3));
/// assert_eq!(Tokenizer::CharNgrams(5).to_string(), "chars:5");
/// assert_eq!(Tokenizer::default(), Tokenizer::Words);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Tokenizer {
    /// Unicode words (UAX #29 word boundaries, as
    /// [`unicode_words`](unicode_segmentation::UnicodeSegmentation::unicode_words)):
    /// segments containing at least one alphanumeric character, lower-cased.
    /// `"Don't panic!"` gives `don't`, `panic`. Each CJK ideograph is a word
    /// of its own. The default.
    #[default]
    Words,
    /// Maximal runs of alphabetic characters, lower-cased, as the `Strspn`
    /// tokenizer of seomoz simhash-cpp: `"Don't panic, 42x!"` gives `don`,
    /// `t`, `panic`, `x`. Digits and punctuation only separate tokens.
    /// simhash-cpp accepts ASCII letters only and keeps their case; this
    /// tokenizer accepts every Unicode alphabetic character and lower-cases,
    /// so ASCII text differs from simhash-cpp only in case.
    Letters,
    /// Chinese (and mixed Chinese/other) text: every maximal run of CJK
    /// ideographs is segmented into dictionary words by jieba (its built-in
    /// dictionary, HMM for unknown words on); the text between runs is
    /// tokenized as by [`Tokenizer::Words`]. Punctuation and whitespace are
    /// dropped. `"我们中出了一个叛徒 Hello"` gives multi-character words
    /// such as `我们`, `一个`, `叛徒`, then `hello`.
    ///
    /// Needs the crate feature `chinese` (on by default); without it,
    /// building a [`Simhasher`](super::Simhasher) with this tokenizer is a
    /// [`FingerprintError::FeatureDisabled`] error. The variant itself always
    /// exists, so configurations naming it can still be parsed and reported.
    Chinese,
    /// Overlapping character n-grams of `n` characters (`chars:N`), for short
    /// texts. The text is lower-cased character by character, runs of
    /// whitespace become one space and leading/trailing whitespace is
    /// removed; punctuation is kept. A text shorter than `n` characters (but
    /// not empty) gives one feature: the whole normalised text. `n` must be
    /// at least 1, and these features are not shingled again (shingle width
    /// must be 1).
    CharNgrams(usize),
}

/// The n-gram size of `chars` without `:N`.
pub const DEFAULT_CHAR_NGRAM: usize = 3;

impl fmt::Display for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tokenizer::Words => f.write_str("words"),
            Tokenizer::Letters => f.write_str("letters"),
            Tokenizer::Chinese => f.write_str("chinese"),
            Tokenizer::CharNgrams(n) => write!(f, "chars:{n}"),
        }
    }
}

impl FromStr for Tokenizer {
    type Err = FingerprintError;

    /// Parses `words`, `letters`, `chinese`, `chars` or `chars:N` (N ≥ 1).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || FingerprintError::Parse {
            what: "tokenizer",
            input: s.to_owned(),
            expected: "one of `words`, `letters`, `chinese`, `chars`, `chars:N` (N >= 1)",
        };
        match s {
            "words" => Ok(Tokenizer::Words),
            "letters" => Ok(Tokenizer::Letters),
            "chinese" => Ok(Tokenizer::Chinese),
            "chars" => Ok(Tokenizer::CharNgrams(DEFAULT_CHAR_NGRAM)),
            _ => {
                let n = s.strip_prefix("chars:").ok_or_else(bad)?;
                // `usize::from_str` accepts a leading `+`; the canonical form does not.
                if !n.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                match n.parse::<usize>() {
                    Ok(n) if n >= 1 => Ok(Tokenizer::CharNgrams(n)),
                    _ => Err(bad()),
                }
            }
        }
    }
}

/// Calls `emit` with each token of `text`, in order.
///
/// `Tokenizer::CharNgrams` is handled by [`for_each_char_ngram`] instead; here
/// it yields nothing.
pub(crate) fn for_each_token(tokenizer: Tokenizer, text: &str, emit: &mut impl FnMut(&str)) {
    let mut buf = String::new();
    match tokenizer {
        Tokenizer::Words => {
            for_each_word(text, &mut |word| emit_lowercase(word, &mut buf, emit));
        }
        Tokenizer::Letters => {
            for run in text.split(|c: char| !c.is_alphabetic()) {
                if !run.is_empty() {
                    emit_lowercase(run, &mut buf, emit);
                }
            }
        }
        Tokenizer::Chinese => chinese_tokens(text, &mut buf, emit),
        Tokenizer::CharNgrams(_) => {}
    }
}

/// Calls `emit` with the FNV-1a 64 hash ([`fnv1a64`](super::fnv1a64)) of
/// each token [`for_each_token`] gives, in order. For
/// [`Tokenizer::Words`], ASCII words are lower-cased and hashed as they are
/// scanned, without a copy or a second look at their bytes.
pub(crate) fn for_each_token_fnv(tokenizer: Tokenizer, text: &str, emit: &mut impl FnMut(u64)) {
    if tokenizer != Tokenizer::Words {
        return for_each_token(tokenizer, text, &mut |t| emit(super::fnv1a64(t.as_bytes())));
    }
    let mut buf = String::new();
    for_each_piece(text, &mut |piece, ascii| {
        if ascii {
            scan_ascii_words(
                piece,
                &mut HashSink {
                    hash: FNV_OFFSET,
                    emit,
                },
            );
        } else {
            for word in piece.unicode_words() {
                emit_lowercase(word, &mut buf, &mut |t| emit(super::fnv1a64(t.as_bytes())));
            }
        }
    });
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// [`unicode_words`](UnicodeSegmentation::unicode_words), with ASCII text
/// segmented by [`for_each_ascii_word`].
fn for_each_word<'t>(text: &'t str, emit: &mut impl FnMut(&'t str)) {
    for_each_piece(text, &mut |piece, ascii| segment_piece(piece, ascii, emit));
}

/// Cuts `text` into pieces whose words are the text's, and says of each
/// whether it is ASCII. A text that is not all ASCII is cut where a run of
/// ASCII white space starts: every word boundary rule breaks before such a
/// run, and none looks back across it (white space is neither ignored by
/// WB4 nor part of any joining context). Each piece goes to the ASCII
/// segmenter when it is ASCII and to `unicode_words` otherwise.
///
/// Consecutive ASCII pieces are handed over as one (no word crosses their
/// boundary either), so only the pieces around non-ASCII characters are
/// looked for, from one non-ASCII byte to the next.
fn for_each_piece<'t>(text: &'t str, f: &mut impl FnMut(&'t str, bool)) {
    let bytes = text.as_bytes();
    // Where a run of white space starts: the cuts between pieces.
    let is_cut = |i: usize| i > 0 && is_ascii_space(bytes[i]) && !is_ascii_space(bytes[i - 1]);
    let mut start = 0;
    while let Some(p) = first_non_ascii(&bytes[start..]).map(|o| start + o) {
        // The piece holding byte `p` runs from the last cut at or before it
        // (or `start`) to the first cut after it (or the end).
        let cut = (start + 1..p).rev().find(|&i| is_cut(i)).unwrap_or(start);
        if cut > start {
            f(&text[start..cut], true);
        }
        let end = (p + 1..bytes.len())
            .find(|&i| is_cut(i))
            .unwrap_or(bytes.len());
        f(&text[cut..end], false);
        start = end;
    }
    if start < bytes.len() {
        f(&text[start..], true);
    }
}

/// The position of the first byte of `bytes` that is not ASCII.
fn first_non_ascii(bytes: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 32 <= bytes.len() && bytes[i..i + 32].is_ascii() {
        i += 32;
    }
    bytes[i..].iter().position(|b| !b.is_ascii()).map(|o| i + o)
}

/// White space that Unicode's word break property puts in classes that
/// break on both sides (CR, LF, Newline, WSegSpace, Other for the tab).
fn is_ascii_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn segment_piece<'t>(piece: &'t str, ascii: bool, emit: &mut impl FnMut(&'t str)) {
    if ascii {
        for_each_ascii_word(piece, emit);
    } else {
        for word in piece.unicode_words() {
            emit(word);
        }
    }
}

/// The word classes of Unicode's word boundary rules (UAX #29) that ASCII
/// characters have, as far as the rules tell them apart.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AsciiClass {
    /// `A-Z a-z` (ALetter).
    Letter,
    /// `0-9` (Numeric).
    Digit,
    /// `_` (ExtendNumLet).
    Underscore,
    /// `:` (MidLetter).
    MidLetter,
    /// `.` (MidNumLet) and `'` (Single_Quote): between letters or between
    /// digits.
    MidNumLet,
    /// `,` `;` (MidNum).
    MidNum,
    /// Anything else, which never joins a word.
    Other,
}

#[inline]
fn ascii_class(b: u8) -> AsciiClass {
    match b {
        b'a'..=b'z' | b'A'..=b'Z' => AsciiClass::Letter,
        b'0'..=b'9' => AsciiClass::Digit,
        b'_' => AsciiClass::Underscore,
        b':' => AsciiClass::MidLetter,
        b'.' | b'\'' => AsciiClass::MidNumLet,
        b',' | b';' => AsciiClass::MidNum,
        _ => AsciiClass::Other,
    }
}

/// [`unicode_words`](UnicodeSegmentation::unicode_words) for an ASCII text,
/// several times faster: the same words, in order (the tests compare the
/// two on every short string over an alphabet of every class, and on
/// random longer ones). Within ASCII the word boundary rules reduce to:
/// letters, digits and `_` join each other (WB5, WB8–WB10, WB13a/b); `:`
/// joins two letters (WB6/7), `.` and `'` join two letters or two digits
/// (WB6/7, WB11/12), `,` and `;` two digits (WB11/12); anything else breaks.
/// `unicode_words` then keeps the segments with a letter or digit, so a
/// segment of underscores alone is left out.
fn for_each_ascii_word<'t>(text: &'t str, emit: &mut impl FnMut(&'t str)) {
    scan_ascii_words(text, &mut SliceSink(emit));
}

/// What [`scan_ascii_words`] hands each word to: its bytes one by one as
/// they are scanned, then its end.
trait AsciiWordSink<'t> {
    /// The next byte of the word being scanned.
    fn byte(&mut self, b: u8);
    /// The word whose bytes were just handed over ends; `alnum` says
    /// whether it is a word (holds a letter or digit) or a run of
    /// underscores, which is no word.
    fn end(&mut self, word: &'t str, alnum: bool);
}

/// Hands each word on as a slice of the text.
struct SliceSink<'e, E>(&'e mut E);

impl<'t, E: FnMut(&'t str)> AsciiWordSink<'t> for SliceSink<'_, E> {
    #[inline(always)]
    fn byte(&mut self, _: u8) {}
    #[inline(always)]
    fn end(&mut self, word: &'t str, alnum: bool) {
        if alnum {
            (self.0)(word);
        }
    }
}

/// Hands each word on as the FNV-1a 64 hash of its lower-cased bytes.
struct HashSink<'e, E> {
    hash: u64,
    emit: &'e mut E,
}

impl<E: FnMut(u64)> AsciiWordSink<'_> for HashSink<'_, E> {
    #[inline(always)]
    fn byte(&mut self, b: u8) {
        self.hash = (self.hash ^ u64::from(b.to_ascii_lowercase())).wrapping_mul(FNV_PRIME);
    }
    #[inline(always)]
    fn end(&mut self, _: &str, alnum: bool) {
        if alnum {
            (self.emit)(self.hash);
        }
        self.hash = FNV_OFFSET;
    }
}

/// The scan of [`for_each_ascii_word`], handing every byte of each word to
/// `sink` as it goes.
#[inline(always)]
fn scan_ascii_words<'t>(text: &'t str, sink: &mut impl AsciiWordSink<'t>) {
    use AsciiClass::*;
    let bytes = text.as_bytes();
    let n = bytes.len();
    let mut i = 0;
    while i < n {
        let start_class = ascii_class(bytes[i]);
        if !matches!(start_class, Letter | Digit | Underscore) {
            i += 1;
            continue;
        }
        let start = i;
        let mut alnum = start_class != Underscore;
        let mut last = start_class;
        sink.byte(bytes[i]);
        i += 1;
        while i < n {
            let class = ascii_class(bytes[i]);
            match class {
                Letter | Digit | Underscore => {
                    alnum |= class != Underscore;
                    last = class;
                    sink.byte(bytes[i]);
                    i += 1;
                }
                MidLetter | MidNumLet | MidNum => {
                    let after = bytes.get(i + 1).map_or(Other, |&b| ascii_class(b));
                    let joins = match (last, after) {
                        (Letter, Letter) => class != MidNum,
                        (Digit, Digit) => class != MidLetter,
                        _ => false,
                    };
                    if !joins {
                        break;
                    }
                    last = after;
                    sink.byte(bytes[i]);
                    sink.byte(bytes[i + 1]);
                    i += 2;
                }
                Other => break,
            }
        }
        sink.end(&text[start..i], alnum);
    }
}

/// Emits `token` lower-cased, without allocating for ASCII tokens.
#[inline]
fn emit_lowercase(token: &str, buf: &mut String, emit: &mut impl FnMut(&str)) {
    if token.is_ascii() {
        if token.bytes().any(|b| b.is_ascii_uppercase()) {
            buf.clear();
            buf.push_str(token);
            buf.make_ascii_lowercase();
            emit(buf);
        } else {
            emit(token);
        }
    } else if token.chars().all(has_no_lowercase_mapping) {
        // Most non-ASCII tokens (every CJK word) have no case at all.
        emit(token);
    } else {
        // `str::to_lowercase` handles context (a word-final `Σ` becomes `ς`).
        emit(&token.to_lowercase());
    }
}

/// Whether `char::to_lowercase` maps `c` to itself. Characters that change
/// include some that are not `is_uppercase` (title case `ǅ`), so this asks
/// the mapping itself.
#[inline]
fn has_no_lowercase_mapping(c: char) -> bool {
    let mut lower = c.to_lowercase();
    lower.len() == 1 && lower.next() == Some(c)
}

/// CJK Unified Ideographs (main block, extensions A–F and the compatibility
/// ideographs): the characters handed to jieba.
#[cfg(feature = "chinese")]
fn is_cjk_ideograph(c: char) -> bool {
    matches!(c,
        '\u{4E00}'..='\u{9FFF}'
        | '\u{3400}'..='\u{4DBF}'
        | '\u{F900}'..='\u{FAFF}'
        | '\u{20000}'..='\u{2A6DF}'
        | '\u{2A700}'..='\u{2EBEF}'
        | '\u{2F800}'..='\u{2FA1F}'
    )
}

#[cfg(feature = "chinese")]
fn jieba() -> &'static jieba_rs::Jieba {
    use std::sync::LazyLock;
    // Loading the dictionary takes a noticeable fraction of a second: do it
    // once per process, on first use.
    static JIEBA: LazyLock<jieba_rs::Jieba> = LazyLock::new(jieba_rs::Jieba::new);
    &JIEBA
}

/// The `Chinese` tokenizer: maximal runs of CJK ideographs go to jieba, the
/// text between them is tokenized as `Words`.
///
/// Splitting at ideographs first is what UAX #29 does too (an ideograph is a
/// word of its own), except that it would attach a following combining mark
/// to the ideograph; here such a mark starts the next stretch and, having no
/// letter or digit, yields no token.
#[cfg(feature = "chinese")]
fn chinese_tokens(text: &str, buf: &mut String, emit: &mut impl FnMut(&str)) {
    let jieba = jieba();
    let mut rest = text;
    while !rest.is_empty() {
        let start = rest.find(is_cjk_ideograph).unwrap_or(rest.len());
        let Some((other, tail)) = rest.split_at_checked(start) else {
            return;
        };
        for word in other.unicode_words() {
            emit_lowercase(word, buf, emit);
        }
        let end = tail
            .find(|c: char| !is_cjk_ideograph(c))
            .unwrap_or(tail.len());
        let Some((run, after)) = tail.split_at_checked(end) else {
            return;
        };
        if !run.is_empty() {
            // Every token of a run of ideographs is ideographs: no case, no
            // punctuation to drop.
            for token in jieba.cut(run, true) {
                if !token.word.is_empty() {
                    emit(token.word);
                }
            }
        }
        rest = after;
    }
}

/// Without the `chinese` feature no `Simhasher` can hold this tokenizer
/// (building one is an error), so this is never reached.
#[cfg(not(feature = "chinese"))]
fn chinese_tokens(_text: &str, _buf: &mut String, _emit: &mut impl FnMut(&str)) {}

/// Calls `emit` with each character n-gram of the normalised `text`, in order.
pub(crate) fn for_each_char_ngram(n: usize, text: &str, emit: &mut impl FnMut(&str)) {
    if n == 0 {
        return;
    }
    let mut normalised = String::with_capacity(text.len());
    // Byte offset of each character of `normalised`.
    let mut starts: Vec<usize> = Vec::new();
    let mut pending_space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            pending_space = !normalised.is_empty();
            continue;
        }
        if pending_space {
            starts.push(normalised.len());
            normalised.push(' ');
            pending_space = false;
        }
        if c.is_ascii() {
            starts.push(normalised.len());
            normalised.push(c.to_ascii_lowercase());
        } else {
            for lower in c.to_lowercase() {
                starts.push(normalised.len());
                normalised.push(lower);
            }
        }
    }
    if starts.is_empty() {
        return;
    }
    if starts.len() < n {
        emit(&normalised);
        return;
    }
    let count = starts.len() - n + 1;
    for (i, &start) in starts.iter().enumerate().take(count) {
        // i + n <= starts.len(): the gram ends where character i + n starts,
        // or at the end of the text.
        let end = starts.get(i + n).copied().unwrap_or(normalised.len());
        if let Some(gram) = normalised.get(start..end) {
            emit(gram);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(tokenizer: Tokenizer, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        match tokenizer {
            Tokenizer::CharNgrams(n) => {
                for_each_char_ngram(n, text, &mut |t| out.push(t.to_owned()))
            }
            _ => for_each_token(tokenizer, text, &mut |t| out.push(t.to_owned())),
        }
        out
    }

    fn ascii_words(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for_each_ascii_word(text, &mut |w| out.push(w));
        out
    }

    fn words(text: &str) -> Vec<&str> {
        let mut out = Vec::new();
        for_each_word(text, &mut |w| out.push(w));
        out
    }

    /// One character of each class the ASCII rules tell apart, and a few of
    /// the classes Unicode has that they treat as "other".
    const ASCII_ALPHABET: &[u8] = b"aZ7_:.',;  \t\n\r\"-/";

    /// Characters whose word break classes interact with white space and
    /// ASCII: letters and digits outside ASCII, a combining mark (Extend),
    /// a vowel sign that is alphabetic, ZWJ, a soft hyphen (Format),
    /// MidLetter and MidNumLet outside ASCII, an ideograph, an emoji, a
    /// regional indicator, Katakana, a Hebrew letter, a no-break space.
    const OTHER_ALPHABET: &[char] = &[
        'é', '\u{301}', '\u{93f}', '\u{200d}', '\u{ad}', '\u{b7}', '\u{2019}', '中', '👍', '🇦',
        'カ', 'א', '\u{a0}', '٣',
    ];

    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// Calls `f` with every string of up to `max_len` characters of
    /// `alphabet`; returns how many there were.
    fn for_each_string(alphabet: &[char], max_len: u32, f: &mut impl FnMut(&str)) -> usize {
        let k = alphabet.len();
        let mut count = 0;
        for len in 0..=max_len {
            for mut code in 0..k.pow(len) {
                let mut text = String::new();
                for _ in 0..len {
                    text.push(alphabet[code % k]);
                    code /= k;
                }
                f(&text);
                count += 1;
            }
        }
        count
    }

    /// Every string of up to `max_len` characters of `alphabet`, segmented
    /// by `segment` and by `unicode_words`.
    fn compare_all_strings(
        alphabet: &[char],
        max_len: u32,
        segment: fn(&str) -> Vec<&str>,
    ) -> usize {
        for_each_string(alphabet, max_len, &mut |text| {
            let want: Vec<&str> = text.unicode_words().collect();
            assert_eq!(segment(text), want, "{text:?}");
        })
    }

    #[test]
    fn ascii_words_equal_unicode_words_on_every_short_string() {
        let alphabet: Vec<char> = ASCII_ALPHABET.iter().map(|&b| b as char).collect();
        assert!(compare_all_strings(&alphabet, 5, ascii_words) > 1_000_000);
    }

    #[test]
    fn words_equal_unicode_words_on_every_short_mixed_string() {
        let alphabet: Vec<char> = b"a7_.: \t\n,"
            .iter()
            .map(|&b| b as char)
            .chain(OTHER_ALPHABET.iter().copied())
            .collect();
        assert!(compare_all_strings(&alphabet, 4, words) > 250_000);
    }

    #[test]
    fn words_equal_unicode_words_on_random_and_printable_text() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for round in 0..40_000 {
            let len = (next() % 60) as usize;
            let text: String = (0..len)
                .map(|_| {
                    let r = next();
                    match (round % 2, r % 4) {
                        (0, 0) => OTHER_ALPHABET[(r >> 8) as usize % OTHER_ALPHABET.len()],
                        (0, 1) => char::from_u32(((r >> 16) % 0x3000) as u32).unwrap_or(' '),
                        (_, 2) => ASCII_ALPHABET[(r >> 8) as usize % ASCII_ALPHABET.len()] as char,
                        _ => (((r >> 16) % 128) as u8) as char,
                    }
                })
                .collect();
            let want: Vec<&str> = text.unicode_words().collect();
            assert_eq!(words(&text), want, "{text:?}");
            if text.is_ascii() {
                assert_eq!(ascii_words(&text), want, "{text:?}");
            }
        }
        let prose = "It's 3.14, or 1,000,000; e.g. a_b __ _x x_ http://example.com/a.b?c=d:e \
                     don't 'quoted' ... x.y. 2.x x.2 a:b: 9:30 1;2 a;b 1.'2 café\u{301} naïve";
        assert_eq!(words(prose), prose.unicode_words().collect::<Vec<_>>());
    }

    /// The hashes `for_each_token_fnv` gives, and the FNV-1a hashes of the
    /// tokens `for_each_token` gives.
    fn fused_and_plain_hashes(tokenizer: Tokenizer, text: &str) -> (Vec<u64>, Vec<u64>) {
        let mut fused = Vec::new();
        for_each_token_fnv(tokenizer, text, &mut |h| fused.push(h));
        let plain = tokens(tokenizer, text)
            .iter()
            .map(|t| crate::fingerprint::fnv1a64(t.as_bytes()))
            .collect();
        (fused, plain)
    }

    #[test]
    fn hashing_while_scanning_equals_hashing_the_tokens() {
        // Every short string over the ASCII classes, upper case included.
        let alphabet: Vec<char> = "aZ7_:.',; -Q".chars().collect();
        let mut checked = 0;
        for_each_string(&alphabet, 5, &mut |text| {
            let (fused, plain) = fused_and_plain_hashes(Tokenizer::Words, text);
            assert_eq!(fused, plain, "{text:?}");
            checked += usize::from(!plain.is_empty());
        });
        assert!(checked > 100_000, "{checked} strings had words");
        // Random mixed text, ASCII and not, for every tokenizer the
        // fused path serves or hands on.
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        for round in 0..20_000 {
            let len = (next() % 80) as usize;
            let text: String = (0..len)
                .map(|_| {
                    let r = next();
                    match r % 4 {
                        0 if round % 2 == 0 => {
                            OTHER_ALPHABET[(r >> 8) as usize % OTHER_ALPHABET.len()]
                        }
                        1 => "ÉΣAbZ".chars().nth((r >> 8) as usize % 5).unwrap_or('a'),
                        _ => (((r >> 16) % 128) as u8) as char,
                    }
                })
                .collect();
            for tokenizer in [Tokenizer::Words, Tokenizer::Letters] {
                let (fused, plain) = fused_and_plain_hashes(tokenizer, &text);
                assert_eq!(fused, plain, "{tokenizer} {text:?}");
            }
        }
        let (fused, plain) =
            fused_and_plain_hashes(Tokenizer::Words, "The QUICK Don't café ΣΑΣ x_Y 3.14");
        assert_eq!(fused.len(), 7);
        assert_eq!(fused, plain);
    }

    #[test]
    fn words_lowercase_and_drop_punctuation() {
        assert_eq!(
            tokens(Tokenizer::Words, "The QUICK brown fox's 2 dogs, don't!"),
            ["the", "quick", "brown", "fox's", "2", "dogs", "don't"]
        );
        assert_eq!(
            tokens(Tokenizer::Words, "ΟΔΟΣ Straße ÉCOLE"),
            ["οδος", "straße", "école"]
        );
        assert!(tokens(Tokenizer::Words, " \t\n ,.;!? ").is_empty());
        assert!(tokens(Tokenizer::Words, "").is_empty());
    }

    #[test]
    fn lowercasing_matches_str_to_lowercase() {
        let mut buf = String::new();
        let lower = |t: &str, buf: &mut String| {
            let mut out = String::new();
            emit_lowercase(t, buf, &mut |l: &str| out.push_str(l));
            out
        };
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let t = c.to_string();
            assert_eq!(
                lower(&t, &mut buf),
                t.to_lowercase(),
                "U+{:04X}",
                u32::from(c)
            );
        }
        for t in [
            "ὈΔΥΣΣΕΎΣ",
            "ǅungla",
            "ΣΑΣ",
            "İstanbul",
            "ＡＢＣ",
            "中文ABC",
            "abc",
        ] {
            assert_eq!(lower(t, &mut buf), t.to_lowercase(), "{t}");
        }
    }

    #[test]
    fn words_split_ideographs_one_by_one() {
        assert_eq!(tokens(Tokenizer::Words, "叛徒"), ["叛", "徒"]);
    }

    #[test]
    fn letters_match_simhash_cpp_runs() {
        assert_eq!(
            tokens(Tokenizer::Letters, "Don't panic, 42x! e-mail"),
            ["don", "t", "panic", "x", "e", "mail"]
        );
        assert_eq!(
            tokens(Tokenizer::Letters, "Ärger über Öl"),
            ["ärger", "über", "öl"]
        );
        assert!(tokens(Tokenizer::Letters, "123 456 -- !!").is_empty());
    }

    #[test]
    fn char_ngrams_normalise_whitespace() {
        assert_eq!(
            tokens(Tokenizer::CharNgrams(3), "  Ab \t\n cD  "),
            ["ab ", "b c", " cd"]
        );
        assert_eq!(tokens(Tokenizer::CharNgrams(1), "aB"), ["a", "b"]);
        // Shorter than n: the whole normalised text.
        assert_eq!(tokens(Tokenizer::CharNgrams(5), " X  y "), ["x y"]);
        assert_eq!(tokens(Tokenizer::CharNgrams(3), "abc"), ["abc"]);
        assert_eq!(tokens(Tokenizer::CharNgrams(2), "中文字"), ["中文", "文字"]);
        assert!(tokens(Tokenizer::CharNgrams(3), " \t\r\n").is_empty());
        assert!(tokens(Tokenizer::CharNgrams(3), "").is_empty());
        assert!(tokens(Tokenizer::CharNgrams(usize::MAX), "").is_empty());
        assert_eq!(tokens(Tokenizer::CharNgrams(usize::MAX), "ab"), ["ab"]);
    }

    #[test]
    fn char_ngrams_lowercase_may_expand() {
        // 'İ' lower-cases to two characters, "i̇".
        let grams = tokens(Tokenizer::CharNgrams(2), "İx");
        assert_eq!(grams, ["i\u{307}", "\u{307}x"]);
    }

    #[cfg(feature = "chinese")]
    #[test]
    fn chinese_segments_into_dictionary_words() {
        let toks = tokens(Tokenizer::Chinese, "我们中出了一个叛徒");
        assert!(toks.iter().any(|t| t == "我们"), "{toks:?}");
        assert!(toks.iter().any(|t| t == "一个"), "{toks:?}");
        assert!(toks.iter().any(|t| t == "叛徒"), "{toks:?}");
        assert_eq!(toks.concat(), "我们中出了一个叛徒");
    }

    #[cfg(feature = "chinese")]
    #[test]
    fn chinese_handles_mixed_text() {
        let toks = tokens(
            Tokenizer::Chinese,
            "我们使用Rust语言和SimHash算法，don't panic！北京大学",
        );
        assert!(toks.iter().any(|t| t == "我们"), "{toks:?}");
        assert!(toks.iter().any(|t| t == "rust"), "{toks:?}");
        assert!(toks.iter().any(|t| t == "simhash"), "{toks:?}");
        assert!(toks.iter().any(|t| t == "算法"), "{toks:?}");
        assert!(toks.iter().any(|t| t == "don't"), "{toks:?}");
        assert!(toks.iter().any(|t| t == "北京大学"), "{toks:?}");
        for t in &toks {
            assert!(
                t.chars().any(char::is_alphanumeric),
                "punctuation token {t:?}"
            );
            assert_eq!(t, &t.to_lowercase());
        }
    }

    #[cfg(feature = "chinese")]
    #[test]
    fn chinese_drops_marks_after_ideographs() {
        assert_eq!(tokens(Tokenizer::Chinese, "叛\u{301}徒"), ["叛", "徒"]);
        assert_eq!(
            tokens(Tokenizer::Chinese, "中文abc中文"),
            ["中文", "abc", "中文"]
        );
        assert_eq!(
            tokens(Tokenizer::Chinese, "中文 Don't 2024年"),
            ["中文", "don't", "2024", "年"]
        );
    }

    #[cfg(feature = "chinese")]
    #[test]
    fn chinese_drops_punctuation_and_whitespace() {
        assert!(tokens(Tokenizer::Chinese, "，。！？「」 \n\t…").is_empty());
        assert!(tokens(Tokenizer::Chinese, "").is_empty());
    }

    #[test]
    fn tokenizer_names_round_trip() {
        for t in [
            Tokenizer::Words,
            Tokenizer::Letters,
            Tokenizer::Chinese,
            Tokenizer::CharNgrams(1),
            Tokenizer::CharNgrams(3),
            Tokenizer::CharNgrams(12),
        ] {
            assert_eq!(t.to_string().parse::<Tokenizer>(), Ok(t));
        }
        assert_eq!("chars".parse::<Tokenizer>(), Ok(Tokenizer::CharNgrams(3)));
        assert_eq!(
            "chars:07".parse::<Tokenizer>(),
            Ok(Tokenizer::CharNgrams(7))
        );
    }

    #[test]
    fn bad_tokenizer_names_are_errors() {
        for bad in [
            "",
            "Words",
            "word",
            " words",
            "chars:",
            "chars:0",
            "chars:-1",
            "chars:+3",
            "chars:x",
            "chars:3:4",
            "chars3",
            "chars:99999999999999999999999",
        ] {
            assert!(bad.parse::<Tokenizer>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn odd_input_does_not_panic() {
        let odd = "\u{0}\u{1F}\u{7F}\u{200B}\u{FEFF}\u{202E}e\u{301}\u{301}\u{1F468}\u{200D}\u{1F469}\u{10FFFF}\u{D7FF}叛\u{301}徒\u{E000}";
        for t in [
            Tokenizer::Words,
            Tokenizer::Letters,
            Tokenizer::Chinese,
            Tokenizer::CharNgrams(1),
            Tokenizer::CharNgrams(4),
        ] {
            let _ = tokens(t, odd);
        }
        let grams = tokens(Tokenizer::CharNgrams(1), "\u{0}\u{1F}");
        assert_eq!(grams, ["\u{0}", "\u{1F}"]);
    }
}
