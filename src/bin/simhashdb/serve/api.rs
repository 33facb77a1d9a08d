//! The JSON bodies of the HTTP API (docs/SERVER.md), and turning a request's
//! documents into `(id, fingerprint, name)` by the command line's rules.

use std::fmt;

use serde::de::{self, Deserializer, Unexpected, Visitor};
use serde::{Deserialize, Serialize};
use simhashdb::format::MAX_NAME_LEN;
use simhashdb::sketch::TextValues;
use simhashdb::{Checked, Doc, Match, Simhasher, VerifiedMatch};

use super::error::ApiError;
use crate::docs::{document, is_blank_text};
use simhashdb::doc_id;

/// An unsigned 64-bit integer, given as a JSON number or a decimal string
/// (JSON parsers of some languages lose precision above 2^53).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct U64(pub u64);

impl<'de> Deserialize<'de> for U64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<U64, D::Error> {
        struct U64Visitor;
        impl Visitor<'_> for U64Visitor {
            type Value = U64;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an unsigned 64-bit integer (a JSON number or a decimal string)")
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<U64, E> {
                Ok(U64(v))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<U64, E> {
                u64::try_from(v)
                    .map(U64)
                    .map_err(|_| E::invalid_value(Unexpected::Signed(v), &self))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<U64, E> {
                parse_decimal(v).ok_or_else(|| E::invalid_value(Unexpected::Str(v), &self))
            }
        }
        deserializer.deserialize_any(U64Visitor)
    }
}

/// A JSON array of at most [`parse_bounded`]'s limit of items: the limit
/// is enforced while the body is parsed, so a body of millions of `{}`
/// costs no more than the limit's worth of items before it is refused.
#[derive(Debug)]
pub struct Items<T>(pub Vec<T>);

std::thread_local! {
    /// The limit [`Items`] enforce on this thread, and whether one did.
    static ITEM_LIMIT: std::cell::Cell<(usize, bool)> = const { std::cell::Cell::new((usize::MAX, false)) };
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Items<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Items<T>, D::Error> {
        struct ItemsVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for ItemsVisitor<T> {
            type Value = Items<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }

            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Items<T>, A::Error> {
                let (max, _) = ITEM_LIMIT.get();
                let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(max).min(1024));
                while let Some(item) = seq.next_element()? {
                    if items.len() >= max {
                        ITEM_LIMIT.set((max, true));
                        return Err(de::Error::custom(format!("more than {max} items")));
                    }
                    items.push(item);
                }
                Ok(Items(items))
            }
        }
        deserializer.deserialize_seq(ItemsVisitor(std::marker::PhantomData))
    }
}

/// Parses `bytes`, every [`Items`] in it holding at most `max_items`; the
/// error, and whether it is that an [`Items`] held more.
pub fn parse_bounded<T: de::DeserializeOwned>(
    bytes: &[u8],
    max_items: usize,
) -> Result<T, (serde_json::Error, bool)> {
    ITEM_LIMIT.set((max_items, false));
    let parsed = serde_json::from_slice(bytes);
    let (_, over) = ITEM_LIMIT.replace((usize::MAX, false));
    parsed.map_err(|e| (e, over))
}

/// A decimal string of digits only (no sign, no spaces) that fits in 64 bits.
pub fn parse_decimal(s: &str) -> Option<U64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok().map(U64)
}

/// One document of a request, as sent: either `{"name", "text"}` or
/// `{"id", "fingerprint", "name"?}` ([`DocumentIn::resolve`] tells which).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocumentIn {
    name: Option<String>,
    text: Option<String>,
    id: Option<U64>,
    fingerprint: Option<U64>,
}

impl DocumentIn {
    /// The bytes of its text (0 without one).
    pub fn text_len(&self) -> usize {
        self.text.as_ref().map_or(0, String::len)
    }
}

/// A document ready for the index.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub id: u64,
    pub fingerprint: u64,
    pub name: Option<String>,
    /// A text's values (its sketch is stored with it, and a check answers
    /// by the verified rule); `None` for a bare fingerprint.
    pub values: Option<TextValues>,
}

impl Document {
    /// What the library checks: the text's values, or the fingerprint.
    pub fn checked(&self) -> Checked {
        self.values
            .map_or(Checked::Fingerprint(self.fingerprint), Checked::Text)
    }
}

/// A request's document, resolved: ready for the index, or a blank text
/// (no letter or digit, or no feature for the index's tokenizer), which the
/// index never stores, as `simhashdb check` and `add` do not: its
/// fingerprint would be 0, a duplicate of every other blank text.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolved {
    Document(Document),
    Blank { id: u64 },
}

impl Resolved {
    /// The document, or a 400 naming it if it is blank (`position`: its
    /// index in the request).
    pub fn non_blank(self, position: usize) -> Result<Document, ApiError> {
        match self {
            Resolved::Document(doc) => Ok(doc),
            Resolved::Blank { .. } => Err(ApiError::invalid(format!(
                "documents[{position}]: {BLANK_TEXT}; nothing was written"
            ))),
        }
    }
}

/// Why a blank text is refused.
pub const BLANK_TEXT: &str = "the text is blank (no letter or digit, or no word for the index's \
     tokenizer): its fingerprint would be 0, a duplicate of every other blank text";

impl DocumentIn {
    /// The document's id, fingerprint and name: a text is fingerprinted with
    /// the index's recorded configuration and gets the id of its name, as
    /// `simhashdb add` and `check` do; `position` names it in errors.
    pub fn resolve(self, position: usize, hasher: &Simhasher) -> Result<Resolved, ApiError> {
        let bad = |why: &str| {
            ApiError::invalid(format!(
                "documents[{position}]: {why}; a document is {{\"name\", \"text\"}} or \
                 {{\"id\", \"fingerprint\", \"name\"?}}"
            ))
        };
        if let Some(name) = &self.name
            && name.len() > MAX_NAME_LEN
        {
            return Err(ApiError::invalid(format!(
                "documents[{position}]: the name is {} bytes, more than the limit of {MAX_NAME_LEN}",
                name.len()
            )));
        }
        match self {
            DocumentIn {
                name: Some(name),
                text: Some(text),
                id: None,
                fingerprint: None,
            } => {
                let doc = document(name, text.as_bytes(), false);
                let id = doc_id(&doc.name);
                Ok(match doc.fingerprint_checked(hasher, 1.0) {
                    Some(fingerprint) => Resolved::Document(Document {
                        id,
                        fingerprint,
                        values: Some(TextValues {
                            fingerprint: Some(fingerprint),
                            ..TextValues::of(hasher, &doc.text)
                        }),
                        name: Some(doc.name),
                    }),
                    None => Resolved::Blank { id },
                })
            }
            DocumentIn {
                text: Some(_),
                name: None,
                ..
            } => Err(bad("a text needs a name (its id is derived from the name)")),
            DocumentIn { text: Some(_), .. } => Err(bad(
                "a text comes with a name only: its id and fingerprint are derived",
            )),
            DocumentIn {
                id: Some(U64(id)),
                fingerprint: Some(U64(fingerprint)),
                name,
                text: None,
            } => Ok(Resolved::Document(Document {
                id,
                fingerprint,
                name,
                values: None,
            })),
            DocumentIn { id: None, .. } => Err(bad("no \"id\" (or \"text\")")),
            DocumentIn { .. } => Err(bad("no \"fingerprint\"")),
        }
    }
}

/// `POST /v1/check`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    pub documents: Items<DocumentIn>,
    /// Sync the index before answering (survives power loss).
    #[serde(default)]
    pub sync: bool,
    /// Largest distance at which a stored document without a sketch
    /// counts as a duplicate (and, for a document given by fingerprint,
    /// any); default: the index's k.
    pub distance: Option<u32>,
    /// The estimated similarity from which a stored document with a sketch
    /// is a duplicate of a text; default: `Sketch::threshold_for` the text.
    pub threshold: Option<f64>,
}

/// `POST /v1/documents`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InsertRequest {
    pub documents: Items<DocumentIn>,
    #[serde(default)]
    pub sync: bool,
}

/// One query of `POST /v1/query`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryIn {
    pub text: Option<String>,
    pub fingerprint: Option<U64>,
    pub k: Option<u32>,
    /// The most matches returned, nearest first.
    pub limit: Option<U64>,
    /// For a text: the similarity threshold (default: `Sketch::threshold_for`).
    pub threshold: Option<f64>,
}

/// `POST /v1/backup`: where to write the backup, on the server's machine.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    /// An absolute path that does not exist or is an empty directory.
    pub path: std::path::PathBuf,
}

/// `POST /v1/query`: one query, or `{"queries": [...]}` (with an optional
/// `k` and `limit` for those that give none).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    pub text: Option<String>,
    pub fingerprint: Option<U64>,
    pub k: Option<u32>,
    pub limit: Option<U64>,
    pub threshold: Option<f64>,
    pub queries: Option<Items<QueryIn>>,
}

impl QueryIn {
    /// What to look up (a text's values, or a fingerprint) and the
    /// distance; `label` names the query in errors.
    pub fn resolve(
        &self,
        label: &str,
        hasher: &Simhasher,
        default_k: u32,
        default_threshold: Option<f64>,
    ) -> Result<(Checked, u32), ApiError> {
        let checked = match (&self.text, self.fingerprint) {
            (Some(text), None) => match hasher.fingerprint_checked(text) {
                Some(_) if !is_blank_text(text) => {
                    let mut values = TextValues::of(hasher, text);
                    if let Some(t) = self.threshold.or(default_threshold) {
                        values.threshold = check_threshold(label, t)?;
                    }
                    Checked::Text(values)
                }
                _ => return Err(ApiError::invalid(format!("{label}: {BLANK_TEXT}"))),
            },
            (None, Some(U64(fp))) => {
                if self.threshold.is_some() {
                    return Err(ApiError::invalid(format!(
                        "{label}: a \"threshold\" applies to a \"text\" only"
                    )));
                }
                Checked::Fingerprint(fp)
            }
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid(format!(
                    "{label}: give \"text\" or \"fingerprint\", not both"
                )));
            }
            (None, None) => {
                return Err(ApiError::invalid(format!(
                    "{label}: give \"text\" or \"fingerprint\""
                )));
            }
        };
        Ok((checked, self.k.unwrap_or(default_k)))
    }
}

/// `threshold` if it lies in [0, 1], else a 400 naming `label`.
pub fn check_threshold(label: &str, threshold: f64) -> Result<f64, ApiError> {
    if (0.0..=1.0).contains(&threshold) {
        Ok(threshold)
    } else {
        Err(ApiError::invalid(format!(
            "{label}: \"threshold\" must lie between 0 and 1, not {threshold}"
        )))
    }
}

/// A document found near a text, with the verified rule's verdict: the
/// estimated similarity of the texts (`null` when the document has no
/// sketch) and the rule that accepted it (`sketch` or `fingerprint`).
#[derive(Debug, Serialize)]
pub struct VerifiedOut<'a> {
    #[serde(flatten)]
    pub doc: MatchOut<'a>,
    pub similarity: Option<f64>,
    pub rule: &'static str,
}

impl<'a> From<&'a VerifiedMatch> for VerifiedOut<'a> {
    fn from(m: &'a VerifiedMatch) -> VerifiedOut<'a> {
        VerifiedOut {
            doc: MatchOut::from(&m.doc),
            similarity: m.similarity,
            rule: m.rule.as_str(),
        }
    }
}

/// A document found near another.
#[derive(Debug, Serialize)]
pub struct MatchOut<'a> {
    pub id: u64,
    pub name: Option<&'a str>,
    pub fingerprint: u64,
    pub distance: u32,
}

impl<'a> From<&'a Match> for MatchOut<'a> {
    fn from(m: &'a Match) -> MatchOut<'a> {
        MatchOut {
            id: m.id,
            name: m.name.as_deref(),
            fingerprint: m.fingerprint,
            distance: m.distance,
        }
    }
}

/// The answer for one checked document.
#[derive(Debug, Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum CheckResult<'a> {
    /// Inserted: no document lay within the distance.
    New { id: u64, fingerprint: u64 },
    /// Not inserted: the nearest existing document the verified rule
    /// accepted.
    Duplicate {
        id: u64,
        fingerprint: u64,
        #[serde(rename = "match")]
        nearest: VerifiedOut<'a>,
    },
    /// Not inserted, not looked up: the text is blank.
    Blank { id: u64 },
}

/// A stored document.
#[derive(Debug, Serialize)]
pub struct DocOut<'a> {
    pub id: u64,
    pub name: Option<&'a str>,
    pub fingerprint: u64,
    pub timestamp_ms: u64,
}

impl<'a> From<&'a Doc> for DocOut<'a> {
    fn from(d: &'a Doc) -> DocOut<'a> {
        DocOut {
            id: d.id,
            name: d.name.as_deref(),
            fingerprint: d.fingerprint,
            timestamp_ms: d.timestamp_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u64_of(json: &str) -> Result<u64, String> {
        serde_json::from_str::<U64>(json)
            .map(|v| v.0)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn ids_are_json_numbers_or_decimal_strings() {
        assert_eq!(u64_of("7"), Ok(7));
        assert_eq!(u64_of("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(u64_of("\"18446744073709551615\""), Ok(u64::MAX));
        assert_eq!(u64_of("\"0\""), Ok(0));
        for bad in [
            "-1",
            "1.5",
            "18446744073709551616",
            "\"18446744073709551616\"",
            "\"-1\"",
            "\" 7\"",
            "\"0x10\"",
            "\"\"",
            "null",
            "true",
            "[1]",
        ] {
            assert!(u64_of(bad).is_err(), "{bad} was accepted");
        }
    }

    fn resolve(json: &str) -> Result<Document, String> {
        let doc: DocumentIn = serde_json::from_str(json).map_err(|e| e.to_string())?;
        doc.resolve(3, &Simhasher::default())
            .and_then(|r| r.non_blank(3))
            .map_err(|e| e.message().to_string())
    }

    #[test]
    fn a_named_text_gets_the_cli_id_and_fingerprint() {
        let doc = resolve(r#"{"name": "https://a.example/x", "text": "some words here"}"#)
            .expect("valid");
        assert_eq!(doc.id, doc_id("https://a.example/x"));
        assert_eq!(
            doc.fingerprint,
            Simhasher::default().fingerprint("some words here")
        );
        assert_eq!(doc.name.as_deref(), Some("https://a.example/x"));
        let doc = resolve(r#"{"id": "5", "fingerprint": 9}"#).expect("valid");
        assert_eq!((doc.id, doc.fingerprint, doc.name), (5, 9, None));
    }

    #[test]
    fn blank_texts_resolve_to_blank_with_their_names_id() {
        for text in ["", "  \n", "... !", "\u{a0}"] {
            let json = serde_json::json!({"name": "n", "text": text}).to_string();
            let doc: DocumentIn = serde_json::from_str(&json).expect("parses");
            let resolved = doc.resolve(3, &Simhasher::default()).expect("resolves");
            assert_eq!(resolved, Resolved::Blank { id: doc_id("n") }, "{text:?}");
            let err = resolve(&json).expect_err(text);
            assert!(err.starts_with("documents[3]: the text is blank"), "{err}");
        }
        let query = QueryIn {
            text: Some(" ,".into()),
            fingerprint: None,
            k: None,
            limit: None,
            threshold: None,
        };
        let err = query
            .resolve("queries[1]", &Simhasher::default(), 3, None)
            .expect_err("blank query");
        assert!(err.message().starts_with("queries[1]: the text is blank"));
    }

    #[test]
    fn mixed_or_incomplete_documents_are_refused_by_position() {
        for bad in [
            r#"{"text": "no name"}"#,
            r#"{"name": "n", "text": "t", "id": 1}"#,
            r#"{"name": "n", "text": "t", "fingerprint": 1}"#,
            r#"{"id": 1}"#,
            r#"{"fingerprint": 1}"#,
            r#"{"name": "only a name"}"#,
            r#"{}"#,
        ] {
            let err = resolve(bad).expect_err(bad);
            assert!(err.starts_with("documents[3]: "), "{bad}: {err}");
        }
        let long = format!(
            r#"{{"id": 1, "fingerprint": 2, "name": "{}"}}"#,
            "x".repeat(MAX_NAME_LEN + 1)
        );
        assert!(resolve(&long).expect_err("long").contains("limit"));
        assert!(
            resolve(r#"{"id": 1, "fingerprint": 2, "url": "x"}"#)
                .expect_err("unknown")
                .contains("unknown field `url`")
        );
    }
}
