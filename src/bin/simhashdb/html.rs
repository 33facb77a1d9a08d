//! HTML documents reduced to the text a reader sees.
//!
//! The page goes through html5ever's tokenizer only, not its tree builder:
//! building the tree costs time quadratic in the nesting depth (each start
//! tag looks through the stack of open elements), and walking it recursively
//! overflows the stack on a page of 100,000 nested `<div>`s. The text is
//! gathered from the token stream with one counter per kind of hidden or
//! heading element, so the work is linear in the input and the memory does
//! not grow with the depth.

use std::cell::RefCell;

use html5ever::tendril::StrTendril;
use html5ever::tokenizer::states::RawKind;
use html5ever::tokenizer::{
    BufferQueue, TagKind, Token, TokenSink, TokenSinkResult, Tokenizer, TokenizerOpts,
};

/// The visible text of an HTML document, and the part of it in the title
/// and headings (which `--heading-weight` counts more).
#[derive(Debug, Default, PartialEq)]
pub struct HtmlText {
    /// The title and the body's text, without scripts, styles and markup;
    /// block elements are separated by newlines.
    pub text: String,
    /// The text of `<title>` and `<h1>`..`<h6>`, also contained in `text`.
    pub headings: String,
}

/// Elements whose content is never shown as text.
const HIDDEN: [&str; 7] = [
    "script", "style", "noscript", "template", "svg", "iframe", "object",
];

/// Elements whose text counts as a heading.
const HEADINGS: [&str; 7] = ["title", "h1", "h2", "h3", "h4", "h5", "h6"];

/// Elements that end a line of text, so words on both sides stay apart.
const BLOCK: [&str; 28] = [
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "p",
    "pre",
    "section",
    "tr",
];

/// How the tokenizer must read an element's content, as a browser's tree
/// builder would tell it (HTML standard, "parsing main in body").
fn raw_kind(name: &str) -> Option<TokenSinkResult<()>> {
    Some(match name {
        "title" | "textarea" => TokenSinkResult::RawData(RawKind::Rcdata),
        "style" | "xmp" | "iframe" | "noembed" | "noframes" | "noscript" => {
            TokenSinkResult::RawData(RawKind::Rawtext)
        }
        "script" => TokenSinkResult::RawData(RawKind::ScriptData),
        "plaintext" => TokenSinkResult::Plaintext,
        _ => return None,
    })
}

/// The text gathered so far, and how many of each hidden and heading
/// element are open.
#[derive(Default)]
struct Gather {
    out: HtmlText,
    hidden: [u32; HIDDEN.len()],
    headings: [u32; HEADINGS.len()],
}

impl Gather {
    fn hidden(&self) -> bool {
        self.hidden.iter().any(|&n| n > 0)
    }

    fn in_heading(&self) -> bool {
        self.headings.iter().any(|&n| n > 0)
    }

    fn tag(&mut self, kind: TagKind, name: &str, self_closing: bool) {
        let opens = kind == TagKind::StartTag;
        // An element closed by its own start tag (`<svg/>`) opens nothing.
        let counts = opens && !self_closing || kind == TagKind::EndTag;
        if counts && let Some(i) = HIDDEN.iter().position(|&h| h == name) {
            bump(&mut self.hidden[i], opens);
        }
        let heading = HEADINGS.iter().position(|&h| h == name);
        if counts && let Some(i) = heading {
            if !opens && self.headings[i] > 0 && !self.hidden() {
                self.out.headings.push('\n');
            }
            bump(&mut self.headings[i], opens);
        }
        if (heading.is_some() || BLOCK.contains(&name)) && !self.hidden() {
            self.out.text.push('\n');
        }
    }

    fn text(&mut self, text: &str) {
        if self.hidden() {
            return;
        }
        push_text(&mut self.out.text, text);
        if self.in_heading() {
            push_text(&mut self.out.headings, text);
        }
    }
}

/// Counts an element opened or closed; an end tag without a start tag is ignored.
fn bump(count: &mut u32, opens: bool) {
    *count = if opens {
        count.saturating_add(1)
    } else {
        count.saturating_sub(1)
    };
}

struct Sink(RefCell<Gather>);

impl TokenSink for Sink {
    type Handle = ();

    fn process_token(&self, token: Token, _line: u64) -> TokenSinkResult<()> {
        let mut gather = self.0.borrow_mut();
        match token {
            Token::TagToken(tag) => {
                let name: &str = &tag.name;
                // HTML ignores `/>` except on foreign elements such as
                // `<svg/>`: `<script/>` still starts a script.
                let self_closing = tag.self_closing && name == "svg";
                gather.tag(tag.kind, name, self_closing);
                if tag.kind == TagKind::StartTag
                    && !self_closing
                    && let Some(raw) = raw_kind(name)
                {
                    return raw;
                }
            }
            Token::CharacterTokens(text) => gather.text(&text),
            _ => {}
        }
        TokenSinkResult::Continue
    }
}

/// Reads `source` leniently (as a browser does: any input is accepted) and
/// returns its visible text, in time linear in its length.
pub fn visible_text(source: &str) -> HtmlText {
    let tokenizer = Tokenizer::new(Sink(RefCell::default()), TokenizerOpts::default());
    let input = BufferQueue::default();
    input.push_back(StrTendril::from_slice(source));
    // The sink never asks to stop for a script, so one call reads everything.
    let _ = tokenizer.feed(&input);
    tokenizer.end();
    tokenizer.sink.0.into_inner().out
}

/// Appends `text` with its runs of whitespace collapsed to one space.
fn push_text(out: &mut String, text: &str) {
    let mut space = out.ends_with(char::is_whitespace);
    for c in text.chars() {
        if c.is_whitespace() {
            if !space && !out.is_empty() {
                out.push(' ');
            }
            space = true;
        } else {
            out.push(c);
            space = false;
        }
    }
}

/// Whether a file name has an HTML extension.
pub fn is_html_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    [".html", ".htm", ".xhtml"]
        .iter()
        .any(|ext| lower.ends_with(ext))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_scripts_styles_and_markup() {
        let page = visible_text(
            "<!doctype html><html><head><title>Rust  storage</title>\
             <style>body { color: red }</style><script>var hidden = 1;</script></head>\
             <body><h1>Engines</h1><p>Segments are <b>immutable</b>.</p><div>Next</div>\
             <noscript>enable js</noscript><!-- a comment --></body></html>",
        );
        let words: Vec<&str> = page.text.split_whitespace().collect();
        assert_eq!(
            words,
            [
                "Rust",
                "storage",
                "Engines",
                "Segments",
                "are",
                "immutable.",
                "Next"
            ]
        );
        let headings: Vec<&str> = page.headings.split_whitespace().collect();
        assert_eq!(headings, ["Rust", "storage", "Engines"]);
    }

    #[test]
    fn block_elements_separate_words_and_broken_markup_is_accepted() {
        let page = visible_text("<p>one</p><p>two<br>three<span>four</span></p><div><b>unclosed");
        let words: Vec<&str> = page.text.split_whitespace().collect();
        assert_eq!(words, ["one", "two", "threefour", "unclosed"]);
        assert!(page.headings.is_empty());
    }

    #[test]
    fn deep_nesting_is_read_without_recursion() {
        let depth = 200_000;
        let page = format!(
            "{}deep{}",
            "<div><span>".repeat(depth),
            "</span></div>".repeat(depth)
        );
        assert_eq!(
            visible_text(&page)
                .text
                .split_whitespace()
                .collect::<Vec<_>>(),
            ["deep"]
        );
        let hidden = format!(
            "{}secret{}shown",
            "<svg>".repeat(depth),
            "</svg>".repeat(depth)
        );
        assert_eq!(visible_text(&hidden).text.trim(), "shown");
    }

    #[test]
    fn raw_text_elements_hide_markup_like_content() {
        let page = visible_text(
            "<script>if (a < b) { document.write('<p>fake</p>') }</script>\
             <textarea><b>typed</b></textarea><title>A &amp; B</title><p>real</p>",
        );
        let words: Vec<&str> = page.text.split_whitespace().collect();
        assert_eq!(words, ["<b>typed</b>", "A", "&", "B", "real"]);
        assert_eq!(page.headings.trim(), "A & B");
        let page = visible_text("<script/>var x = '<p>hidden</p>';</script><svg/>shown");
        assert_eq!(page.text.trim(), "shown");
    }

    #[test]
    fn html_names() {
        assert!(is_html_name("a/b/index.HTML"));
        assert!(is_html_name("page.htm"));
        assert!(!is_html_name("notes.txt"));
        assert!(!is_html_name("html"));
    }
}
