//! Bounds-checked little-endian reads, and a cursor that turns a short read
//! into a [`FormatError`] with an absolute offset.

use std::io::{self, Write};

use super::{FileKind, FormatError, FormatErrorKind};

/// A writer that counts the bytes written through it and, unless made with
/// [`counting`](Self::counting), checksums them.
#[derive(Debug)]
pub(crate) struct Sink<W> {
    out: W,
    written: u64,
    crc: Option<crc32fast::Hasher>,
}

impl<W: Write> Sink<W> {
    pub(crate) fn new(out: W) -> Self {
        Sink {
            out,
            written: 0,
            crc: Some(crc32fast::Hasher::new()),
        }
    }

    pub(crate) fn counting(out: W) -> Self {
        Sink {
            out,
            written: 0,
            crc: None,
        }
    }

    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// The CRC32 since the last reset, restarting it (the count keeps running).
    pub(crate) fn reset_crc(&mut self) -> u32 {
        self.crc
            .as_mut()
            .map_or(0, |crc| std::mem::take(crc).finalize())
    }

    pub(crate) fn into_inner(self) -> W {
        self.out
    }
}

impl<W: Write> Write for Sink<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        let done = buf.get(..n).unwrap_or_default();
        if let Some(crc) = &mut self.crc {
            crc.update(done);
        }
        self.written += to_u64(done.len());
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[inline]
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    let chunk = bytes.get(at..)?.first_chunk::<8>()?;
    Some(u64::from_le_bytes(*chunk))
}

#[inline]
pub(crate) fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    let chunk = bytes.get(at..)?.first_chunk::<4>()?;
    Some(u32::from_le_bytes(*chunk))
}

pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// Converts an on-disk length or offset to `usize`, failing on targets where
/// it does not fit (the bytes could not be in memory anyway).
pub(crate) fn to_usize(v: u64) -> Option<usize> {
    usize::try_from(v).ok()
}

/// `usize` to the on-disk `u64` (never fails on supported targets).
#[inline]
pub(crate) fn to_u64(v: usize) -> u64 {
    v as u64
}

/// Reads fields in order from a byte slice that starts at `base` in its file.
pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    base: u64,
    file: FileKind,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8], base: u64, file: FileKind) -> Cursor<'a> {
        Cursor {
            bytes,
            pos: 0,
            base,
            file,
        }
    }

    /// Absolute offset of the next byte.
    pub(crate) fn offset(&self) -> u64 {
        self.base + to_u64(self.pos)
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    pub(crate) fn error(&self, kind: FormatErrorKind) -> FormatError {
        FormatError::new(self.file, self.offset(), kind)
    }

    pub(crate) fn malformed(&self, what: &'static str) -> FormatError {
        FormatError::malformed(self.file, self.offset(), what)
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.pos.checked_add(n);
        match end.and_then(|end| self.bytes.get(self.pos..end)) {
            Some(s) => {
                self.pos += n;
                Ok(s)
            }
            None => Err(self.error(FormatErrorKind::Truncated {
                needed: to_u64(n),
                available: to_u64(self.remaining()),
            })),
        }
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let s = self.take(N)?;
        s.first_chunk::<N>()
            .copied()
            .ok_or_else(|| self.malformed("internal: short read"))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, FormatError> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, FormatError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub(crate) fn u64(&mut self) -> Result<u64, FormatError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
}

/// Checks the magic and the version at the start of a file, in that order, so
/// that a file of another kind or of a newer version gets that error rather
/// than a checksum mismatch. See docs/FORMAT.md#conventions.
pub(crate) fn check_magic_and_version(bytes: &[u8], file: FileKind) -> Result<(), FormatError> {
    let expected = file.magic();
    let mut got = [0u8; 8];
    for (dst, src) in got.iter_mut().zip(bytes) {
        *dst = *src;
    }
    if got != expected {
        if bytes.len() < 8 && expected.starts_with(bytes) {
            return Err(FormatError::new(
                file,
                0,
                FormatErrorKind::Truncated {
                    needed: 12,
                    available: to_u64(bytes.len()),
                },
            ));
        }
        return Err(FormatError::new(
            file,
            0,
            FormatErrorKind::BadMagic { expected, got },
        ));
    }
    let version = u32_at(bytes, 8).ok_or_else(|| {
        FormatError::new(
            file,
            0,
            FormatErrorKind::Truncated {
                needed: 12,
                available: to_u64(bytes.len()),
            },
        )
    })?;
    if !(super::OLDEST_READ_VERSION..=super::FORMAT_VERSION).contains(&version) {
        return Err(FormatError::new(
            file,
            8,
            FormatErrorKind::UnsupportedVersion {
                expected: super::FORMAT_VERSION,
                got: version,
            },
        ));
    }
    Ok(())
}

/// Checks a stored CRC32 against the bytes it covers (which start at `offset`).
pub(crate) fn check_crc(
    file: FileKind,
    offset: u64,
    covered: &[u8],
    stored: u32,
) -> Result<(), FormatError> {
    let computed = crc32(covered);
    if computed != stored {
        return Err(FormatError::new(
            file,
            offset,
            FormatErrorKind::ChecksumMismatch {
                expected: stored,
                got: computed,
            },
        ));
    }
    Ok(())
}

/// Asks the processor to bring the cache lines of `bytes[range]` (clamped
/// to `bytes`) into its caches, without waiting for them: a hint that lets
/// a search with several places to read wait for their memory once instead
/// of once per line. Unlike a load, a prefetch holds nothing up while it is
/// in flight, and on a page not mapped yet it does nothing.
#[inline]
pub(crate) fn prefetch(bytes: &[u8], range: std::ops::Range<usize>) {
    let end = range.end.min(bytes.len());
    let mut at = range.start;
    while at < end {
        prefetch_line(bytes, at);
        at += 64;
    }
    // The last line, when the range starts after a line boundary.
    if end > range.start {
        prefetch_line(bytes, end - 1);
    }
}

/// [`prefetch`] into the second-level cache only (`PREFETCHT2`): the
/// lines are asked for without holding the first-level cache's few miss
/// buffers while they come, so that more lines can be in flight at once;
/// the first line is brought into the first level as by [`prefetch`]. For
/// a search that asks for many lines of several places ahead of reading
/// them in order (a probed plan's runs: docs/ARCHITECTURE.md, "A probed
/// plan's runs are compared eight keys at a time").
#[inline]
pub(crate) fn prefetch_to_l2(bytes: &[u8], range: std::ops::Range<usize>) {
    let end = range.end.min(bytes.len());
    if end <= range.start {
        return;
    }
    prefetch_line(bytes, range.start);
    let mut at = range.start + 64;
    while at < end {
        prefetch_line_with::<HINT_L2, u8>(bytes, at);
        at += 64;
    }
    prefetch_line_with::<HINT_L2, u8>(bytes, end - 1);
}

/// Asks the processor to bring the cache line of `items[at]` into its
/// caches, without waiting for it ([`prefetch`] for any slice); nothing
/// when `at` is out of bounds.
#[inline]
pub(crate) fn prefetch_line<T>(items: &[T], at: usize) {
    prefetch_line_with::<HINT_L1, T>(items, at);
}

/// Where [`prefetch_line_with`] brings a line: every level of cache.
#[cfg(target_arch = "x86_64")]
const HINT_L1: i32 = std::arch::x86_64::_MM_HINT_T0;
/// Where [`prefetch_line_with`] brings a line: the second level and beyond.
#[cfg(target_arch = "x86_64")]
const HINT_L2: i32 = std::arch::x86_64::_MM_HINT_T2;
#[cfg(not(target_arch = "x86_64"))]
const HINT_L1: i32 = 0;
#[cfg(not(target_arch = "x86_64"))]
const HINT_L2: i32 = 0;

/// [`prefetch_line`] into the second-level cache only, as
/// [`prefetch_to_l2`] asks for its lines: for a search that asks for the
/// lines of many places at once, more than the first level's miss buffers
/// hold.
#[inline]
pub(crate) fn prefetch_line_to_l2<T: Copy>(items: &[T], at: usize) {
    prefetch_line_with::<HINT_L2, T>(items, at);
}

/// [`prefetch_line`] with the processor's hint `HINT`.
#[inline]
fn prefetch_line_with<const HINT: i32, T>(items: &[T], at: usize) {
    let Some(item) = items.get(at) else {
        return;
    };
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads and writes no memory the program can see and
    // never faults, whatever its address; this one is in bounds anyway.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<HINT>(std::ptr::from_ref(item).cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::hint::black_box(item);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::format::FileKind;

    /// Version 5 is written, versions 3 to 5 are read; anything else
    /// (version 2 included: its doc map has another layout) is refused
    /// naming both versions.
    #[test]
    fn reads_versions_three_to_five_only() {
        let with_version = |v: u32| {
            let mut bytes = FileKind::Manifest.magic().to_vec();
            bytes.extend_from_slice(&v.to_le_bytes());
            bytes
        };
        assert_eq!(super::super::FORMAT_VERSION, 5);
        for v in [3, 4, 5] {
            check_magic_and_version(&with_version(v), FileKind::Manifest).unwrap();
        }
        for v in [0, 1, 2, 6] {
            let e = check_magic_and_version(&with_version(v), FileKind::Manifest).unwrap_err();
            assert_eq!(
                e.kind,
                FormatErrorKind::UnsupportedVersion {
                    expected: 5,
                    got: v
                }
            );
        }
    }
}
