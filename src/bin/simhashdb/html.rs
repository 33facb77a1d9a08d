//! HTML documents reduced to the text a reader sees.

use scraper::{ElementRef, Html, Node};

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
const HIDDEN: [&str; 8] = [
    "script", "style", "noscript", "template", "head", "svg", "iframe", "object",
];

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

fn is_heading(name: &str) -> bool {
    matches!(name, "title" | "h1" | "h2" | "h3" | "h4" | "h5" | "h6")
}

/// Parses `source` leniently (as a browser does: any input is accepted) and
/// returns its visible text.
pub fn visible_text(source: &str) -> HtmlText {
    let document = Html::parse_document(source);
    let mut out = HtmlText::default();
    // The title lives in <head>, which is otherwise hidden.
    if let Ok(selector) = scraper::Selector::parse("head > title") {
        for title in document.select(&selector) {
            let text: String = title.text().collect();
            push_text(&mut out.text, &text);
            push_text(&mut out.headings, &text);
            out.text.push('\n');
            out.headings.push('\n');
        }
    }
    walk(document.root_element(), false, &mut out);
    out
}

fn walk(element: ElementRef<'_>, in_heading: bool, out: &mut HtmlText) {
    let name = element.value().name();
    if HIDDEN.contains(&name) {
        return;
    }
    let in_heading = in_heading || is_heading(name);
    let block = BLOCK.contains(&name) || is_heading(name);
    if block {
        out.text.push('\n');
    }
    for child in element.children() {
        match child.value() {
            Node::Text(text) => {
                push_text(&mut out.text, text);
                if in_heading {
                    push_text(&mut out.headings, text);
                }
            }
            Node::Element(_) => {
                if let Some(child) = ElementRef::wrap(child) {
                    walk(child, in_heading, out);
                }
            }
            _ => {}
        }
    }
    if block {
        out.text.push('\n');
        if in_heading {
            out.headings.push('\n');
        }
    }
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
    fn html_names() {
        assert!(is_html_name("a/b/index.HTML"));
        assert!(is_html_name("page.htm"));
        assert!(!is_html_name("notes.txt"));
        assert!(!is_html_name("html"));
    }
}
