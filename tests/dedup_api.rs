//! `simhashdb::dedup`, the verified deduplication engine, through its public
//! API: every drop checked against the exact Jaccard of the two texts, the
//! keep rule checked against a brute-force scan of all pairs, and the
//! bounded-memory check (many passes) giving the same answer as one pass.

use simhashdb::Simhasher;
use simhashdb::dedup::{self, DedupError, Fate, Keep, Settings, TextChunk, TextSource};
use simhashdb::recheck::jaccard;

fn word(x: u64) -> String {
    const SYLLABLES: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "ta", "vo", "xi", "ba", "de", "fu", "go", "hi", "ju", "pe",
        "so",
    ];
    let mut w = String::new();
    let mut y = x;
    for _ in 0..3 {
        w.push_str(SYLLABLES[(y & 15) as usize]);
        y >>= 4;
    }
    w
}

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// 300 texts of 60 words: 200 originals, 100 copies of earlier ones with
/// 0 to 5 words changed (some of them longer), and a few blank ones.
fn corpus() -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    for i in 0..300u64 {
        if i % 97 == 13 {
            texts.push("  ... --- ...  ".into());
            continue;
        }
        if i % 3 == 2 {
            let of = (mix(i) % i) as usize;
            let mut words: Vec<String> = texts[of].split(' ').map(str::to_owned).collect();
            for e in 0..(mix(i + 1) % 6) {
                let at = (mix(i * 31 + e) % words.len() as u64) as usize;
                words[at] = word(mix(i * 77 + e));
            }
            if i % 2 == 0 {
                words.push(word(mix(i * 5)));
            }
            texts.push(words.join(" "));
        } else {
            texts.push(
                (0..60)
                    .map(|w| word(mix(i * 1000 + w)))
                    .collect::<Vec<_>>()
                    .join(" "),
            );
        }
    }
    texts
}

/// Brute force: every claim the outcome makes, checked against the exact
/// Jaccard of the texts.
fn check_against_brute_force(texts: &[String], settings: &Settings, keep: Keep) {
    let h = Simhasher::default();
    let outcome = dedup::dedup(&h, texts, settings, keep).unwrap();
    let n = texts.len();
    assert_eq!(outcome.fate.len(), n);
    let chars: Vec<u32> = texts.iter().map(|t| t.chars().count() as u32).collect();
    let order = dedup::keep_order(n, keep, &chars);
    let mut rank = vec![0usize; n];
    for (r, &i) in order.iter().enumerate() {
        rank[i as usize] = r;
    }
    let j = |a: usize, b: usize| jaccard(&h, &texts[a], &texts[b], settings.width);
    for (i, f) in outcome.fate.iter().enumerate() {
        if let Fate::Duplicate { of } = *f {
            let similarity = outcome.similarity(i as u32);
            let of = of as usize;
            assert_eq!(
                outcome.fate[of],
                Fate::Kept,
                "{i} dropped against a dropped record"
            );
            assert!(rank[of] < rank[i], "{i} dropped against a later record");
            let exact = j(i, of);
            assert!(exact >= settings.threshold, "{i}~{of}: J = {exact}");
            assert_eq!(similarity, Some(exact));
            // The most similar earlier kept record among the pairs that
            // qualify is the one chosen (the brute-force scan of all of
            // them may find one the band search did not offer, never a
            // better one the search offered: checked by its similarity
            // being at least that of every exact copy).
            for k in 0..n {
                if k != i
                    && outcome.fate[k] == Fate::Kept
                    && rank[k] < rank[i]
                    && texts[k] == texts[i]
                {
                    assert_eq!(exact, 1.0, "{i} has an exact copy {k} kept");
                }
            }
        }
    }
    // Exact copies of kept records are never kept twice (they share every
    // band): among kept, non-blank records, no two texts are equal.
    let mut kept: Vec<&str> = (0..n)
        .filter(|&i| outcome.fate[i] == Fate::Kept && !dedup::is_blank_text(&texts[i]))
        .map(|i| texts[i].as_str())
        .collect();
    kept.sort_unstable();
    assert!(kept.windows(2).all(|w| w[0] != w[1]));
    // Blank texts are always kept.
    for (i, t) in texts.iter().enumerate() {
        if dedup::is_blank_text(t) {
            assert_eq!(outcome.fate[i], Fate::Kept);
        }
    }
    // The groups: each kept record with the records dropped against it.
    for (g, kept) in outcome.groups.iter().zip(&outcome.kept_of_group) {
        assert!(g.contains(kept));
        for &m in g {
            if m != *kept {
                assert_eq!(outcome.fate[m as usize], Fate::Duplicate { of: *kept });
            }
        }
    }
    assert_eq!(
        outcome.dropped(),
        outcome.groups.iter().map(|g| g.len() - 1).sum::<usize>()
    );
}

#[test]
fn dedup_drops_only_verified_duplicates_of_earlier_kept_records() {
    let texts = corpus();
    check_against_brute_force(&texts, &Settings::default(), Keep::First);
    check_against_brute_force(&texts, &Settings::default(), Keep::Longest);
    let loose = Settings {
        threshold: 0.5,
        width: 3,
        ..Settings::default()
    };
    check_against_brute_force(&texts, &loose, Keep::First);
    let outcome = dedup::dedup(
        &Simhasher::default(),
        &texts,
        &Settings::default(),
        Keep::First,
    )
    .unwrap();
    // The planted copies with at most one word changed in 60 (J >= 51/61
    // at width 5), about a third of the 100, are found.
    assert!(outcome.dropped() >= 25, "{} dropped", outcome.dropped());
}

#[test]
fn dedup_by_distance_finds_every_pair_within_the_distance() {
    let texts = corpus();
    let h = Simhasher::default();
    let settings = Settings {
        verify: false,
        distance: Some(4),
        ..Settings::default()
    };
    let outcome = dedup::dedup(&h, &texts, &settings, Keep::First).unwrap();
    let fps: Vec<u64> = texts.iter().map(|t| h.fingerprint(t)).collect();
    // Brute force: a pair within 4 bits (of non-blank texts) is in one group.
    let group_of = |i: usize| outcome.groups.iter().position(|g| g.contains(&(i as u32)));
    for a in 0..texts.len() {
        for b in a + 1..texts.len() {
            let blank = dedup::is_blank_text(&texts[a]) || dedup::is_blank_text(&texts[b]);
            if !blank && simhashdb::hamming(fps[a], fps[b]) <= 4 {
                assert!(
                    group_of(a).is_some() && group_of(a) == group_of(b),
                    "{a} {b}"
                );
            }
        }
    }
    assert!(outcome.similarities.is_empty());
    assert!(outcome.dropped() > 0);
}

/// A source that counts its passes.
struct Counting<'a> {
    texts: &'a [String],
    passes: std::cell::Cell<usize>,
}

impl TextSource for Counting<'_> {
    type Error = std::convert::Infallible;

    fn scan(
        &self,
        what: &'static str,
        want: &(dyn Fn(u64) -> bool + Sync),
        f: &mut dyn FnMut(&TextChunk<'_>),
    ) -> Result<(), Self::Error> {
        self.passes.set(self.passes.get() + 1);
        self.texts.scan(what, want, f)
    }
}

#[test]
fn dedup_check_in_tiny_memory_takes_more_passes_and_gives_the_same_answer() {
    let texts = corpus();
    let h = Simhasher::default();
    let answer = |memory: usize| {
        let settings = Settings {
            verify_memory: memory,
            ..Settings::default()
        };
        let mut sketches = settings.sketches(&h, false);
        sketches.push(&texts);
        let n = sketches.len();
        let order = dedup::keep_order(n, Keep::First, &sketches.chars);
        let candidates = sketches.candidates(&order);
        assert!(candidates.found >= candidates.pairs.len() as u64);
        let source = Counting {
            texts: &texts,
            passes: std::cell::Cell::new(0),
        };
        let checked = settings.check(&h, &source, n, candidates.pairs).unwrap();
        assert_eq!(checked.passes, source.passes.get());
        (settings.keep(n, &checked, &order), checked.passes)
    };
    let (roomy, one) = answer(dedup::DEFAULT_VERIFY_MEMORY);
    let (tight, many) = answer(1);
    assert_eq!(one, 1);
    assert!(many > 1, "{many} passes");
    assert_eq!(roomy, tight);
    assert_eq!(
        roomy,
        dedup::dedup(&h, &texts, &Settings::default(), Keep::First).unwrap()
    );
}

#[test]
fn dedup_refuses_settings_out_of_range_naming_them() {
    let h = Simhasher::default();
    let texts = ["a text", "another text"];
    let bad = |s: Settings| dedup::dedup(&h, &texts, &s, Keep::First).unwrap_err();
    let e = bad(Settings {
        threshold: 1.5,
        ..Settings::default()
    });
    assert!(
        matches!(&e, DedupError::InvalidSetting(m) if m.contains("threshold")),
        "{e}"
    );
    let e = bad(Settings {
        width: 0,
        ..Settings::default()
    });
    assert!(e.to_string().contains("shingle width"), "{e}");
    let e = bad(Settings {
        distance: Some(64),
        ..Settings::default()
    });
    assert!(e.to_string().contains("distance 64"), "{e}");
    let empty: [&str; 0] = [];
    let outcome = dedup::dedup(&h, &empty, &Settings::default(), Keep::First).unwrap();
    assert!(outcome.fate.is_empty() && outcome.groups.is_empty());
}
