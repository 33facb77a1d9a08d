//! The frame segment and doc map files share: a checksummed header, sections
//! laid back to back, a directory of the sections (offset, length, CRC32) and a
//! footer that ends with the magic again.
//!
//! See docs/FORMAT.md#container.

use std::io::{self, Write};

use super::bytes::{
    Sink, check_crc, check_magic_and_version, crc32, to_u64, to_usize, u32_at, u64_at,
};
use super::{FileKind, FormatError, FormatErrorKind};

/// Offset (u64), length (u64), CRC32 (u32).
pub(crate) const DIR_ENTRY_LEN: usize = 20;
/// Directory offset, file length, section count, directory CRC, header CRC,
/// footer CRC, magic.
pub(crate) const FOOTER_LEN: usize = 40;

/// Writes a container: the header first, then sections, then
/// [`finish`](Self::finish) writes the directory and footer.
#[derive(Debug)]
pub(crate) struct ContainerWriter<W: Write> {
    sink: Sink<W>,
    file: FileKind,
    header_crc: u32,
    sections: Vec<(u64, u64, u32)>,
    section_start: u64,
}

impl<W: Write> ContainerWriter<W> {
    /// Writes `header` (magic, version and kind-specific fields) followed by
    /// its CRC32.
    pub(crate) fn new(out: W, file: FileKind, header: &[u8]) -> io::Result<Self> {
        let mut sink = Sink::new(out);
        let header_crc = crc32(header);
        sink.write_all(header)?;
        sink.write_all(&header_crc.to_le_bytes())?;
        sink.reset_crc();
        let section_start = sink.written();
        Ok(ContainerWriter {
            sink,
            file,
            header_crc,
            sections: Vec::new(),
            section_start,
        })
    }

    /// Where the bytes of the current section go.
    pub(crate) fn sink(&mut self) -> &mut Sink<W> {
        &mut self.sink
    }

    /// Closes the section written since the previous one.
    pub(crate) fn end_section(&mut self) {
        let crc = self.sink.reset_crc();
        let start = self.section_start;
        let end = self.sink.written();
        self.sections.push((start, end - start, crc));
        self.section_start = end;
    }

    pub(crate) fn section_count(&self) -> usize {
        self.sections.len()
    }

    pub(crate) fn finish(mut self) -> io::Result<W> {
        let dir_offset = self.sink.written();
        let mut dir = Vec::with_capacity(self.sections.len() * DIR_ENTRY_LEN);
        for &(offset, len, crc) in &self.sections {
            dir.extend_from_slice(&offset.to_le_bytes());
            dir.extend_from_slice(&len.to_le_bytes());
            dir.extend_from_slice(&crc.to_le_bytes());
        }
        self.sink.write_all(&dir)?;
        let file_len = self.sink.written() + to_u64(FOOTER_LEN);
        let mut footer = Vec::with_capacity(FOOTER_LEN);
        footer.extend_from_slice(&dir_offset.to_le_bytes());
        footer.extend_from_slice(&file_len.to_le_bytes());
        footer.extend_from_slice(&(self.sections.len() as u32).to_le_bytes());
        footer.extend_from_slice(&crc32(&dir).to_le_bytes());
        footer.extend_from_slice(&self.header_crc.to_le_bytes());
        let footer_crc = crc32(&footer);
        footer.extend_from_slice(&footer_crc.to_le_bytes());
        footer.extend_from_slice(&self.file.magic());
        self.sink.write_all(&footer)?;
        self.sink.flush()?;
        Ok(self.sink.into_inner())
    }
}

/// A container whose header, footer and directory have been checked, and
/// whose sections are known to lie inside the bytes, back to back.
///
/// It holds offsets only, so that readers can own their bytes (a memory map)
/// next to it; every method takes the same bytes again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Container {
    file: FileKind,
    section_count: usize,
    dir_offset: usize,
    footer_crc: u32,
}

/// One section: its bytes, where they start in the file, their stored CRC.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Section<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) offset: u64,
    pub(crate) crc: u32,
}

impl Container {
    /// Checks, in order: magic and version, the header's CRC (`header_len`
    /// bytes, CRC last), the footer (magic, CRC, file length, header CRC
    /// copy), the directory's CRC, and that the sections tile the bytes
    /// between header and directory. Returns the header bytes.
    pub(crate) fn open(
        bytes: &[u8],
        file: FileKind,
        header_len: usize,
    ) -> Result<(Container, &[u8]), FormatError> {
        check_magic_and_version(bytes, file)?;
        let len = bytes.len();
        let truncated = |needed: usize| {
            FormatError::new(
                file,
                0,
                FormatErrorKind::Truncated {
                    needed: to_u64(needed),
                    available: to_u64(len),
                },
            )
        };
        let header = bytes
            .get(..header_len)
            .ok_or_else(|| truncated(header_len))?;
        let (header_body, header_crc) = header
            .split_at_checked(header_len.saturating_sub(4))
            .unwrap_or_default();
        let header_crc = u32_at(header_crc, 0).unwrap_or_default();
        check_crc(file, 0, header_body, header_crc)?;

        let min_len = header_len + FOOTER_LEN;
        if len < min_len {
            return Err(truncated(min_len));
        }
        let footer_at = len - FOOTER_LEN;
        let footer = bytes.get(footer_at..).unwrap_or_default();
        if footer.get(32..) != Some(&file.magic()[..]) {
            return Err(FormatError::new(
                file,
                to_u64(footer_at),
                FormatErrorKind::MissingFooter,
            ));
        }
        let covered = footer.get(..28).unwrap_or_default();
        check_crc(
            file,
            to_u64(footer_at),
            covered,
            u32_at(footer, 28).unwrap_or_default(),
        )?;
        let footer_crc = u32_at(footer, 28).unwrap_or_default();
        let dir_offset = u64_at(footer, 0).unwrap_or_default();
        let file_len = u64_at(footer, 8).unwrap_or_default();
        let section_count = u32_at(footer, 16).unwrap_or_default();
        let dir_crc = u32_at(footer, 20).unwrap_or_default();
        let header_crc_copy = u32_at(footer, 24).unwrap_or_default();
        let malformed = |at: usize, what| FormatError::malformed(file, to_u64(at), what);
        if file_len != to_u64(len) {
            return Err(malformed(
                footer_at + 8,
                "the footer records a different file length than the file has",
            ));
        }
        if header_crc_copy != header_crc {
            return Err(malformed(
                footer_at + 24,
                "the footer belongs to a different header",
            ));
        }
        let dir_end = u64::from(section_count)
            .checked_mul(to_u64(DIR_ENTRY_LEN))
            .and_then(|n| n.checked_add(dir_offset));
        if dir_end != Some(to_u64(footer_at)) || dir_offset < to_u64(header_len) {
            return Err(malformed(
                footer_at,
                "the section directory does not fit between the header and the footer",
            ));
        }
        let dir_offset = to_usize(dir_offset)
            .ok_or_else(|| malformed(footer_at, "the file is too large for this platform"))?;
        let dir = bytes.get(dir_offset..footer_at).unwrap_or_default();
        check_crc(file, to_u64(dir_offset), dir, dir_crc)?;
        let container = Container {
            file,
            section_count: section_count as usize,
            dir_offset,
            footer_crc,
        };
        let mut expected = to_u64(header_len);
        for i in 0..container.section_count {
            let at = dir_offset + i * DIR_ENTRY_LEN;
            let offset = u64_at(bytes, at).unwrap_or_default();
            let section_len = u64_at(bytes, at + 8).unwrap_or_default();
            if offset != expected {
                return Err(malformed(
                    at,
                    "a section does not start where the previous one ends",
                ));
            }
            expected = offset
                .checked_add(section_len)
                .filter(|&end| end <= to_u64(dir_offset))
                .ok_or_else(|| malformed(at + 8, "a section extends past the directory"))?;
        }
        if expected != to_u64(dir_offset) {
            return Err(malformed(
                dir_offset,
                "the sections do not end where the directory starts",
            ));
        }
        Ok((container, header_body))
    }

    pub(crate) fn section_count(&self) -> usize {
        self.section_count
    }

    /// The footer's CRC32: it covers the header's and the directory's CRCs,
    /// which cover everything else, so it identifies the file's contents.
    pub(crate) fn footer_crc(&self) -> u32 {
        self.footer_crc
    }

    pub(crate) fn section<'a>(
        &self,
        bytes: &'a [u8],
        i: usize,
    ) -> Result<Section<'a>, FormatError> {
        let at = self
            .dir_offset
            .saturating_add(i.saturating_mul(DIR_ENTRY_LEN));
        let bad = || FormatError::malformed(self.file, to_u64(at), "no such section");
        if i >= self.section_count {
            return Err(bad());
        }
        let offset = u64_at(bytes, at).ok_or_else(bad)?;
        let len = u64_at(bytes, at + 8).ok_or_else(bad)?;
        let crc = u32_at(bytes, at + 16).ok_or_else(bad)?;
        // open() checked that every section lies inside the file.
        let start = to_usize(offset).ok_or_else(bad)?;
        let end = offset.checked_add(len).and_then(to_usize).ok_or_else(bad)?;
        let bytes = bytes.get(start..end).ok_or_else(bad)?;
        Ok(Section { bytes, offset, crc })
    }

    /// Checks the CRC32 of every section.
    pub(crate) fn verify_sections(&self, bytes: &[u8]) -> Result<(), FormatError> {
        for i in 0..self.section_count {
            let s = self.section(bytes, i)?;
            check_crc(self.file, s.offset, s.bytes, s.crc)?;
        }
        Ok(())
    }
}
