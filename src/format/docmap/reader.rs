//! Reading doc maps. Layout: docs/FORMAT.md#doc-map-file.

use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::super::FormatError;
use super::super::bytes::{check_crc, prefetch, to_u64, to_usize, u32_at, u64_at};
use super::super::container::Container;
use super::block::{BLOCK_LEN, Decoded, EntryBlock, IdBlock, index_record, stored_first_key};
use super::{DocEntry, FILE, HEADER_LEN, SECTIONS, TOMBSTONE_LEN, Tombstone, pair_hash};

/// Where the sections are; offsets only, so the reader can own its bytes.
#[derive(Debug, Clone)]
struct Layout {
    /// Entry blocks, their index, id blocks, their index, tombstones, names.
    sections: [Range<usize>; SECTIONS],
    entry_count: usize,
    tombstone_count: usize,
}

/// A blocks section and its block index.
#[derive(Debug, Clone, Copy)]
struct Blocks<'a> {
    blocks: &'a [u8],
    blocks_at: u64,
    index: &'a [u8],
    index_at: u64,
    /// Records in all blocks.
    records: usize,
}

impl<'a> Blocks<'a> {
    fn count(&self) -> usize {
        self.records.div_ceil(BLOCK_LEN)
    }

    /// Records in block `i`.
    fn len_of(&self, i: usize) -> usize {
        self.records.saturating_sub(i * BLOCK_LEN).min(BLOCK_LEN)
    }

    fn key(&self, i: usize) -> Option<u64> {
        index_record(self.index, i).map(|(k, _)| k)
    }

    fn index_error(&self, i: usize, what: &'static str) -> FormatError {
        FormatError::malformed(FILE, self.index_at + to_u64(i * 16), what)
    }

    /// Block `i`'s bytes, its offset in the file, and its indexed first key.
    fn block(&self, i: usize) -> Result<(&'a [u8], u64, u64), FormatError> {
        let bad = || self.index_error(i, "a doc map block index record points outside its blocks");
        let (key, start) = index_record(self.index, i).ok_or_else(bad)?;
        let end = match index_record(self.index, i + 1) {
            Some((_, next)) => next,
            None => to_u64(self.blocks.len()),
        };
        if (i == 0 && start != 0) || start >= end {
            return Err(bad());
        }
        let range = to_usize(start).zip(to_usize(end)).ok_or_else(bad)?;
        let bytes = self.blocks.get(range.0..range.1).ok_or_else(bad)?;
        Ok((bytes, self.blocks_at + start, key))
    }

    /// Block `i`'s first key when its block index record and the block
    /// agree on it (two copies: a damaged byte cannot make them agree on a
    /// wrong key); an error otherwise.
    fn agreed_key(&self, i: usize) -> Result<u64, FormatError> {
        let (key, start) = index_record(self.index, i)
            .ok_or_else(|| self.index_error(i, "no such doc map block"))?;
        match to_usize(start).and_then(|s| stored_first_key(self.blocks, s)) {
            Some(stored) if stored == key => Ok(key),
            _ => Err(self.index_error(i, "a doc map block index record disagrees with its block")),
        }
    }

    /// The last block whose indexed first key is `<= key` (`strict`: `<`),
    /// or block 0.
    ///
    /// Fingerprints and ids are close to uniform more often than not, so the
    /// search starts where the key falls between the first and last blocks'
    /// first keys and gallops from there: one or two index records read
    /// instead of a bisection's 20 at 50 M documents, each a cache miss.
    fn search(&self, key: u64, strict: bool) -> usize {
        let n = self.count();
        let below = |i: usize| {
            self.key(i)
                .is_none_or(|k| if strict { k < key } else { k <= key })
        };
        let guess = match (
            self.key(0),
            n.checked_sub(1).and_then(|last| self.key(last)),
        ) {
            (Some(first), Some(last)) if first < key && key < last => {
                let span = u128::from(last - first);
                let at = u128::from(key - first) * (n - 1) as u128 / span;
                usize::try_from(at).unwrap_or(0)
            }
            (_, Some(last)) if key >= last => n.saturating_sub(1),
            _ => 0,
        };
        partition_point_from(n, guess, below).saturating_sub(1)
    }
}

/// The first of `0..n` where `below` is false (`below` being true, then
/// false), searched from `guess`: galloping away from it to bracket the
/// point, then bisecting. It reads about twice the log of the distance from
/// the guess, so a good guess costs one or two reads.
fn partition_point_from(n: usize, guess: usize, below: impl Fn(usize) -> bool) -> usize {
    if n == 0 {
        return 0;
    }
    let guess = guess.min(n - 1);
    // Invariant from here: below(lo - 1) (or lo == 0), and hi == n or
    // !below(hi); the point is in lo..=hi.
    let (mut lo, mut hi);
    let mut step = 1usize;
    if below(guess) {
        lo = guess + 1;
        hi = lo;
        while hi < n && below(hi) {
            lo = hi + 1;
            step = step.saturating_mul(2);
            hi = hi.saturating_add(step);
        }
        hi = hi.min(n);
    } else {
        hi = guess;
        lo = loop {
            let probe = hi.saturating_sub(step);
            if probe == hi {
                break 0;
            }
            if below(probe) {
                break probe + 1;
            }
            hi = probe;
            step = step.saturating_mul(2);
        };
    }
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod search_tests {
    use super::partition_point_from;

    #[test]
    fn the_partition_point_is_found_from_any_guess() {
        for n in [0usize, 1, 2, 3, 10, 100, 1000] {
            for point in 0..=n {
                for guess in [0, 1, n / 3, n / 2, point, point.saturating_sub(1), n, n + 5] {
                    let got = partition_point_from(n, guess, |i| {
                        assert!(i < n, "read {i} of {n}");
                        i < point
                    });
                    assert_eq!(got, point, "n {n}, point {point}, guess {guess}");
                }
            }
        }
    }

    #[test]
    fn a_good_guess_reads_a_few_records() {
        let reads = std::cell::Cell::new(0);
        let got = partition_point_from(1_000_000, 500_000, |i| {
            reads.set(reads.get() + 1);
            i < 500_001
        });
        assert_eq!(got, 500_001);
        assert!(reads.get() <= 3, "{} reads", reads.get());
    }
}

/// The blocks of one doc map whose CRC a lookup has checked: a lookup
/// checks each block's CRC the first time it reads it, not on every read
/// (the bytes are an immutable file's). [`DocMapReader::verify`], merges
/// and iterations check every block they read, whatever this says.
#[derive(Debug, Default)]
struct Checked {
    entries: Box<[AtomicU64]>,
    ids: Box<[AtomicU64]>,
}

impl Checked {
    fn new(blocks: usize) -> Checked {
        let words = || {
            (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect()
        };
        Checked {
            entries: words(),
            ids: words(),
        }
    }

    fn get(bits: &[AtomicU64], i: usize) -> bool {
        bits.get(i / 64)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (i % 64)) != 0)
    }

    fn set(bits: &[AtomicU64], i: usize) {
        if let Some(w) = bits.get(i / 64) {
            w.fetch_or(1 << (i % 64), Ordering::Relaxed);
        }
    }
}

/// The sections of a doc map, borrowed; all lookups work on this.
#[derive(Debug, Clone, Copy)]
struct View<'a> {
    entries: Blocks<'a>,
    ids: Blocks<'a>,
    tombstones: &'a [u8],
    tombstones_at: u64,
    names: &'a [u8],
    tombstone_count: usize,
    /// The file's format version (the entry blocks' layout depends on it).
    version: u32,
    /// The blocks already checked, for lookups; `None`: check every block.
    checked: Option<&'a Checked>,
}

fn record(section: &[u8], len: usize, i: usize) -> Option<&[u8]> {
    let start = i.checked_mul(len)?;
    section.get(start..start.checked_add(len)?)
}

/// Index of the first of `count` sorted records whose key is `>= key`.
fn lower_bound(count: usize, key: u64, key_of: impl Fn(usize) -> Option<u64>) -> usize {
    let (mut lo, mut hi) = (0usize, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if key_of(mid).is_none_or(|k| k < key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

impl<'a> View<'a> {
    /// Entry block `i`, checked (CRC, streams, and its first fingerprint
    /// equal to the block index's).
    fn entry_block(&self, i: usize) -> Result<EntryBlock<'a>, FormatError> {
        let (bytes, at, key) = self.entries.block(i)?;
        let known = self.checked.is_some_and(|c| Checked::get(&c.entries, i));
        let block = EntryBlock::parse(
            bytes,
            self.entries.len_of(i),
            self.names,
            at,
            self.version,
            !known,
        )?;
        if block.fingerprint(0) != key {
            return Err(self
                .entries
                .index_error(i, "a doc map block index record disagrees with its block"));
        }
        if let Some(c) = self.checked.filter(|_| !known) {
            Checked::set(&c.entries, i);
        }
        Ok(block)
    }

    /// Id block `i`, checked the same way.
    fn id_block(&self, i: usize) -> Result<IdBlock<'a>, FormatError> {
        let (bytes, at, key) = self.ids.block(i)?;
        let known = self.checked.is_some_and(|c| Checked::get(&c.ids, i));
        let block = IdBlock::parse(bytes, self.ids.len_of(i), at, !known)?;
        if block.ids().first() != Some(&key) {
            return Err(self
                .ids
                .index_error(i, "a doc map block index record disagrees with its block"));
        }
        if let Some(c) = self.checked.filter(|_| !known) {
            Checked::set(&c.ids, i);
        }
        Ok(block)
    }

    fn doc(block: &EntryBlock<'a>, i: usize, at: u64) -> Result<DocEntry<'a>, FormatError> {
        let Decoded {
            fingerprint,
            id,
            seq,
            timestamp,
        } = block.entry(i);
        let name =
            match block.name(i) {
                None => None,
                Some(bytes) => Some(std::str::from_utf8(bytes).map_err(|_| {
                    FormatError::malformed(FILE, at, "a document's name is not UTF-8")
                })?),
            };
        Ok(DocEntry {
            fingerprint,
            id,
            seq,
            timestamp,
            name,
            sketch: block.sketch(i),
        })
    }

    /// The entry at `position`.
    fn entry_at(&self, position: usize) -> Result<DocEntry<'a>, FormatError> {
        let b = position / BLOCK_LEN;
        let block = self.entry_block(b)?;
        Self::doc(&block, position % BLOCK_LEN, self.entries.blocks_at)
    }

    fn tombstone(&self, i: usize) -> Result<Tombstone, FormatError> {
        let at = self.tombstones_at + to_u64(i.saturating_mul(TOMBSTONE_LEN));
        let rec = record(self.tombstones, TOMBSTONE_LEN, i)
            .ok_or_else(|| FormatError::malformed(FILE, at, "no such tombstone"))?;
        check_crc(
            FILE,
            at,
            rec.get(..24).unwrap_or_default(),
            u32_at(rec, 24).unwrap_or_default(),
        )?;
        let field = |at| u64_at(rec, at).unwrap_or_default();
        Ok(Tombstone {
            id: field(0),
            seq: field(8),
            timestamp: field(16),
        })
    }

    fn by_id(&self, id: u64) -> Result<Option<DocEntry<'a>>, FormatError> {
        if self.ids.records == 0 {
            return Ok(None);
        }
        let mut b = self.ids.search(id, false);
        loop {
            let block = self.id_block(b)?;
            let ids = block.ids();
            if let Ok(i) = ids.binary_search(&id) {
                let (_, position) = block.record(i);
                let bad = || {
                    FormatError::malformed(
                        FILE,
                        self.ids.blocks_at,
                        "the id index points to an entry with another id",
                    )
                };
                let position = to_usize(position)
                    .filter(|&p| p < self.entries.records)
                    .ok_or_else(bad)?;
                let entry = self.entry_at(position)?;
                if entry.id != id {
                    return Err(bad());
                }
                return Ok(Some(entry));
            }
            // Not here: it can only be in a later block if that block
            // starts at or before it (the index said no; check both copies).
            if ids.last().is_some_and(|&last| last > id) || b + 1 >= self.ids.count() {
                return Ok(None);
            }
            if self.ids.agreed_key(b + 1)? > id {
                return Ok(None);
            }
            b += 1;
        }
    }

    fn find_tombstone(&self, id: u64) -> Result<Option<Tombstone>, FormatError> {
        let n = self.tombstone_count;
        let p = lower_bound(n, id, |i| {
            u64_at(record(self.tombstones, TOMBSTONE_LEN, i)?, 0)
        });
        if p > 0 && self.tombstone(p - 1)?.id >= id {
            return Err(FormatError::malformed(
                FILE,
                self.tombstones_at + to_u64((p - 1) * TOMBSTONE_LEN),
                "the tombstones are not sorted by id",
            ));
        }
        if p == n {
            return Ok(None);
        }
        let t = self.tombstone(p)?;
        Ok((t.id == id).then_some(t))
    }
}

/// A doc map file, checked cheaply when opened (header, footer, directory,
/// section sizes); blocks are checked as they are read (by lookups, each
/// block's CRC only the first time this reader reads it), and all at once
/// by [`verify`](Self::verify).
#[derive(Debug, Clone)]
pub struct DocMapReader<D> {
    data: D,
    container: Container,
    layout: Layout,
    index_id: u64,
    segment_id: u64,
    version: u32,
    /// The blocks lookups have checked (shared by clones of the reader,
    /// which read the same bytes).
    checked: Arc<Checked>,
}

impl<D: AsRef<[u8]>> DocMapReader<D> {
    /// Opens a doc map. Costs O(1).
    pub fn new(data: D) -> Result<Self, FormatError> {
        let bytes = data.as_ref();
        let (container, header) = Container::open(bytes, FILE, HEADER_LEN)?;
        let field = |at| u64_at(header, at).unwrap_or_default();
        let segment_id = field(12);
        let (entry_count, tombstone_count) = (field(20), field(28));
        let index_id = field(36);
        // `Container::open` checked it is one this build reads.
        let version = u32_at(header, 8).unwrap_or_default();
        if container.section_count() != SECTIONS {
            return Err(FormatError::malformed(
                FILE,
                0,
                "a doc map must have exactly 6 sections",
            ));
        }
        let mut sections: [Range<usize>; SECTIONS] = Default::default();
        let mut offsets = [0u64; SECTIONS];
        for (i, (range, offset)) in sections.iter_mut().zip(offsets.iter_mut()).enumerate() {
            let s = container.section(bytes, i)?;
            let start = to_usize(s.offset).unwrap_or_default();
            *range = start..start + s.bytes.len();
            *offset = s.offset;
        }
        let len = |i: usize| to_u64(sections.get(i).map_or(0, ExactSizeIterator::len));
        let at = |i: usize| offsets.get(i).copied().unwrap_or(0);
        if entry_count > u64::from(u32::MAX) {
            return Err(FormatError::malformed(
                FILE,
                12,
                "a doc map holds at most 2^32 - 1 documents",
            ));
        }
        let blocks = entry_count.div_ceil(super::block::BLOCK_LEN as u64);
        for (blocks_section, index_section) in [(0, 1), (2, 3)] {
            if len(index_section) != 16 * blocks {
                return Err(FormatError::malformed(
                    FILE,
                    at(index_section),
                    "a doc map block index's size does not match the entry count",
                ));
            }
            if (len(blocks_section) == 0) != (blocks == 0) {
                return Err(FormatError::malformed(
                    FILE,
                    at(blocks_section),
                    "a doc map blocks section's size does not match the entry count",
                ));
            }
        }
        if tombstone_count
            .checked_mul(to_u64(TOMBSTONE_LEN))
            .is_none_or(|n| n != len(4))
        {
            return Err(FormatError::malformed(
                FILE,
                at(4),
                "the tombstones section's size does not match the tombstone count",
            ));
        }
        let layout = Layout {
            sections,
            entry_count: to_usize(entry_count).unwrap_or_default(),
            tombstone_count: to_usize(tombstone_count).unwrap_or_default(),
        };
        let checked = Arc::new(Checked::new(to_usize(blocks).unwrap_or_default()));
        Ok(DocMapReader {
            data,
            container,
            layout,
            index_id,
            segment_id,
            version,
            checked,
        })
    }

    /// The view of lookups: each block's CRC checked on its first read.
    fn lookup_view(&self) -> View<'_> {
        View {
            checked: Some(&self.checked),
            ..self.view()
        }
    }

    /// The view of iterations and [`verify`](Self::verify): every block
    /// read is checked.
    fn view(&self) -> View<'_> {
        let bytes = self.data.as_ref();
        let l = &self.layout;
        let get = |i: usize| {
            let r = l.sections.get(i).cloned().unwrap_or(0..0);
            (bytes.get(r.clone()).unwrap_or_default(), to_u64(r.start))
        };
        let blocks = |b: usize, records: usize| {
            let ((blocks, blocks_at), (index, index_at)) = (get(b), get(b + 1));
            Blocks {
                blocks,
                blocks_at,
                index,
                index_at,
                records,
            }
        };
        let (tombstones, tombstones_at) = get(4);
        View {
            entries: blocks(0, l.entry_count),
            ids: blocks(2, l.entry_count),
            tombstones,
            tombstones_at,
            names: get(5).0,
            tombstone_count: l.tombstone_count,
            version: self.version,
            checked: None,
        }
    }

    /// The format version in the file's header (3 or 4: version 3 entries
    /// have no sketch).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The index this doc map belongs to.
    pub fn index_id(&self) -> u64 {
        self.index_id
    }

    /// The segment this doc map belongs to.
    pub fn segment_id(&self) -> u64 {
        self.segment_id
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.layout.entry_count
    }

    /// Whether there are no documents.
    pub fn is_empty(&self) -> bool {
        self.layout.entry_count == 0
    }

    /// Number of tombstones.
    pub fn tombstone_count(&self) -> usize {
        self.layout.tombstone_count
    }

    /// The footer's CRC32, which identifies the file's contents.
    pub fn footer_crc(&self) -> u32 {
        self.container.footer_crc()
    }

    /// The documents with fingerprint `fp`, by increasing id.
    pub fn by_fingerprint(&self, fp: u64) -> ByFingerprint<'_> {
        let view = self.lookup_view();
        let block = view.entries.search(fp, true);
        // The block's lines load together rather than one after another as
        // its CRC is computed.
        if let Ok((bytes, _, _)) = view.entries.block(block) {
            prefetch(bytes, 0..bytes.len());
        }
        ByFingerprint {
            view,
            fp,
            block_index: block,
            block: None,
            pos: 0,
            last_id: None,
            done: view.entries.records == 0,
        }
    }

    /// Where, in the file, the entry block lies that
    /// [`by_fingerprint`](Self::by_fingerprint) of `fp` reads first, and
    /// the next one too when its indexed first key is `fp` (the lookup goes
    /// on into it): for asking the kernel to read them ahead. Reads the
    /// block index only (no block, no checksum); `None` for an empty doc
    /// map or a damaged index record (the lookup then reports it).
    pub fn fingerprint_block_span(&self, fp: u64) -> Option<Range<usize>> {
        let entries = self.lookup_view().entries;
        if entries.records == 0 {
            return None;
        }
        let first = entries.search(fp, true);
        let (bytes, at, _) = entries.block(first).ok()?;
        let start = to_usize(at)?;
        let mut end = start.checked_add(bytes.len())?;
        if entries.key(first + 1) == Some(fp)
            && let Ok((next, next_at, _)) = entries.block(first + 1)
        {
            end = to_usize(next_at)?.checked_add(next.len())?;
        }
        Some(start..end)
    }

    /// The document with id `id`, if this segment holds it.
    pub fn by_id(&self, id: u64) -> Result<Option<DocEntry<'_>>, FormatError> {
        self.lookup_view().by_id(id)
    }

    /// The tombstone for `id`, if this segment holds one.
    pub fn tombstone(&self, id: u64) -> Result<Option<Tombstone>, FormatError> {
        self.view().find_tombstone(id)
    }

    /// Every document, by (fingerprint, id). Checks the order and that the
    /// names of consecutive blocks follow each other.
    pub fn entries(&self) -> Entries<'_> {
        Entries {
            view: self.view(),
            block_index: 0,
            block: None,
            pos: 0,
            last: None,
            name_end: 0,
            done: false,
        }
    }

    /// The id index, by id: each document's id and the position of its
    /// entry in [`entries`](Self::entries) order, each block's CRC checked
    /// (a position past the last entry, or ids out of order, are reported
    /// as errors).
    pub fn ids(&self) -> impl Iterator<Item = Result<(u64, usize), FormatError>> + '_ {
        let view = self.view();
        let mut block: Option<IdBlock<'_>> = None;
        let mut last: Option<u64> = None;
        let mut failed = false;
        (0..self.len()).map_while(move |i| {
            if failed {
                return None;
            }
            let item = (|| {
                let (b, j) = (i / BLOCK_LEN, i % BLOCK_LEN);
                if j == 0 {
                    block = Some(view.id_block(b)?);
                }
                let (id, position) = block.as_ref().map_or((0, u64::MAX), |k| k.record(j));
                let bad = |what| FormatError::malformed(FILE, view.ids.blocks_at, what);
                if last.is_some_and(|l| l >= id) {
                    return Err(bad("the id index is not sorted"));
                }
                last = Some(id);
                let position = to_usize(position)
                    .filter(|&p| p < view.entries.records)
                    .ok_or_else(|| bad("entry position out of range"))?;
                Ok((id, position))
            })();
            failed = item.is_err();
            Some(item)
        })
    }

    /// Every tombstone, by id.
    pub fn tombstones(&self) -> Tombstones<'_> {
        Tombstones {
            view: self.view(),
            pos: 0,
            done: false,
        }
    }

    /// Checks everything: every section's CRC and every block's, the sort
    /// orders, that the id index maps each id to its entry, and that names
    /// are UTF-8 and exactly fill the names section.
    pub fn verify(&self) -> Result<(), FormatError> {
        let bytes = self.data.as_ref();
        self.container.verify_sections(bytes)?;
        let v = self.view();
        let mut entry_pairs = 0u64;
        let mut entries = self.entries();
        for position in 0u32.. {
            let Some(e) = entries.next() else { break };
            entry_pairs = entry_pairs.wrapping_add(pair_hash(e?.id, position));
        }
        if entries.name_end != to_u64(v.names.len()) {
            return Err(FormatError::malformed(
                FILE,
                to_u64(self.layout.sections.get(5).map_or(0, |r| r.start)),
                "the names section holds bytes no entry uses",
            ));
        }
        let mut id_pairs = 0u64;
        for record in self.ids() {
            let (id, position) = record?;
            id_pairs = id_pairs.wrapping_add(pair_hash(id, position as u32));
        }
        if id_pairs != entry_pairs {
            return Err(FormatError::malformed(
                FILE,
                v.ids.blocks_at,
                "the id index does not map its ids to their entries",
            ));
        }
        let mut prev_id: Option<u64> = None;
        for i in 0..v.tombstone_count {
            let t = v.tombstone(i)?;
            if prev_id.is_some_and(|p| p >= t.id) {
                return Err(FormatError::malformed(
                    FILE,
                    v.tombstones_at + to_u64(i * TOMBSTONE_LEN),
                    "the tombstones are not sorted by id",
                ));
            }
            prev_id = Some(t.id);
        }
        Ok(())
    }

    /// Where its two block indexes lie in the file (entries by
    /// fingerprint, then ids): what every lookup reads first, so what is
    /// worth bringing into memory before anything else.
    pub fn index_ranges(&self) -> [Range<usize>; 2] {
        let section = |i: usize| self.layout.sections.get(i).cloned().unwrap_or_default();
        [section(1), section(3)]
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.data.as_ref()
    }

    /// Gives the bytes back.
    pub fn into_inner(self) -> D {
        self.data
    }
}

/// The documents with one fingerprint; see [`DocMapReader::by_fingerprint`].
#[derive(Debug, Clone)]
pub struct ByFingerprint<'a> {
    view: View<'a>,
    fp: u64,
    block_index: usize,
    block: Option<EntryBlock<'a>>,
    pos: usize,
    last_id: Option<u64>,
    done: bool,
}

impl<'a> ByFingerprint<'a> {
    fn step(&mut self) -> Result<Option<DocEntry<'a>>, FormatError> {
        let v = self.view;
        loop {
            let block = match &self.block {
                Some(block) => block,
                None => self.block.insert(v.entry_block(self.block_index)?),
            };
            while self.pos < block.len() {
                let fp = block.fingerprint(self.pos);
                if fp > self.fp {
                    return Ok(None);
                }
                let i = self.pos;
                self.pos += 1;
                if fp == self.fp {
                    let e = View::doc(block, i, v.entries.blocks_at)?;
                    if self.last_id.is_some_and(|l| l >= e.id) {
                        return Err(FormatError::malformed(
                            FILE,
                            v.entries.blocks_at,
                            "entries are not sorted by (fingerprint, id)",
                        ));
                    }
                    self.last_id = Some(e.id);
                    return Ok(Some(e));
                }
            }
            // The block ended at or below `fp`: the next one may go on.
            let next = self.block_index + 1;
            if next >= v.entries.count() || v.entries.agreed_key(next)? > self.fp {
                return Ok(None);
            }
            self.block_index = next;
            self.block = None;
            self.pos = 0;
        }
    }
}

impl<'a> Iterator for ByFingerprint<'a> {
    type Item = Result<DocEntry<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Every document; see [`DocMapReader::entries`].
#[derive(Debug, Clone)]
pub struct Entries<'a> {
    view: View<'a>,
    block_index: usize,
    block: Option<EntryBlock<'a>>,
    pos: usize,
    last: Option<(u64, u64)>,
    /// Where the names read so far end.
    name_end: u64,
    done: bool,
}

impl<'a> Entries<'a> {
    fn step(&mut self) -> Result<Option<DocEntry<'a>>, FormatError> {
        let v = self.view;
        if self.block.as_ref().is_none_or(|b| self.pos >= b.len()) {
            if self.block.is_some() {
                self.block_index += 1;
            }
            if self.block_index >= v.entries.count() {
                return Ok(None);
            }
            let block = v.entry_block(self.block_index)?;
            if block.name_base() != self.name_end {
                return Err(FormatError::malformed(
                    FILE,
                    v.entries.blocks_at,
                    "names do not follow each other in entry order",
                ));
            }
            self.name_end = block.name_end();
            self.block = Some(block);
            self.pos = 0;
        }
        let Some(block) = &self.block else {
            return Ok(None);
        };
        let e = View::doc(block, self.pos, v.entries.blocks_at)?;
        self.pos += 1;
        let key = (e.fingerprint, e.id);
        if self.last.is_some_and(|l| l >= key) {
            return Err(FormatError::malformed(
                FILE,
                v.entries.blocks_at,
                "entries are not sorted by (fingerprint, id)",
            ));
        }
        self.last = Some(key);
        Ok(Some(e))
    }
}

impl<'a> Iterator for Entries<'a> {
    type Item = Result<DocEntry<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.step().transpose();
        self.done = !matches!(item, Some(Ok(_)));
        item
    }
}

/// Every tombstone; see [`DocMapReader::tombstones`].
#[derive(Debug, Clone)]
pub struct Tombstones<'a> {
    view: View<'a>,
    pos: usize,
    done: bool,
}

impl Iterator for Tombstones<'_> {
    type Item = Result<Tombstone, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.view.tombstone_count {
            return None;
        }
        let item = self.view.tombstone(self.pos);
        self.pos += 1;
        self.done = item.is_err();
        Some(item)
    }
}
