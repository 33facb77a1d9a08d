//! The feature configurations compared.

use simhashdb::Simhasher;
use simhashdb::fingerprint::{IdfTable, Tokenizer, Weighting};

pub(crate) struct Config {
    pub(crate) name: String,
    pub(crate) hasher: Simhasher,
}

pub(crate) fn builder(
    tokenizer: Tokenizer,
    shingle: usize,
) -> simhashdb::fingerprint::SimhasherBuilder {
    Simhasher::builder()
        .tokenizer(tokenizer)
        .shingle(shingle)
        .weighting(Weighting::TermFrequency)
}

/// The configurations measured; IDF tables are built from `idf_docs`.
pub(crate) fn configs(idf_docs: &[&str], chinese: bool) -> Vec<Config> {
    use Weighting::{Binary, TermFrequency as Tf};
    let mut bases: Vec<(&str, Tokenizer, usize, Weighting)> = vec![
        ("words", Tokenizer::Words, 1, Tf),
        ("words-2", Tokenizer::Words, 2, Tf),
        ("words-3", Tokenizer::Words, 3, Tf),
        ("words-4", Tokenizer::Words, 4, Tf),
        ("words-bin", Tokenizer::Words, 1, Binary),
        ("words-3-bin", Tokenizer::Words, 3, Binary),
        ("chars:3", Tokenizer::CharNgrams(3), 1, Tf),
        ("chars:5", Tokenizer::CharNgrams(5), 1, Tf),
    ];
    if chinese {
        bases.push(("chinese", Tokenizer::Chinese, 1, Tf));
        bases.push(("chinese-2", Tokenizer::Chinese, 2, Tf));
    }
    let mut out = Vec::new();
    for (name, tok, w, weighting) in bases {
        let b = builder(tok, w).weighting(weighting);
        let plain = b.clone().build().expect("valid config");
        let idf = IdfTable::from_documents(&plain, idf_docs.iter());
        out.push(Config {
            name: name.to_owned(),
            hasher: plain,
        });
        out.push(Config {
            name: format!("{name}+idf"),
            hasher: b.idf(idf).build().expect("valid config"),
        });
    }
    out
}
