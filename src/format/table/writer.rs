//! [`TableWriter`]: keys in, blocks, block index and footer out.

use std::io::Write;

use crate::format::EncodeError;
use crate::format::bytes::{Sink, crc32};

use super::rice::encode_block;
use super::{FOOTER_LEN, MAX_BLOCK_LEN};

/// Builds one table from strictly increasing keys, streaming blocks to `W`.
///
/// Memory is one block of keys plus the block index (16 bytes per block).
/// ```
/// use simhashdb::format::{TableReader, TableWriter};
///
/// let mut writer = TableWriter::new(128)?;
/// for key in [3u64, 10, 11, 1 << 40] {
///     writer.push(key)?;
/// }
/// let bytes = writer.finish()?;
/// let table = TableReader::new(&bytes)?;
/// assert_eq!(table.range(4, 11).collect::<Result<Vec<_>, _>>()?, [10, 11]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TableWriter<W: Write = Vec<u8>> {
    sink: Sink<W>,
    block_len: usize,
    pending: Vec<u64>,
    last: Option<u64>,
    count: u64,
    index: Vec<u8>,
    scratch: Vec<u8>,
}

impl TableWriter<Vec<u8>> {
    /// A writer into a new `Vec<u8>` with `block_len` keys per block
    /// (1..=[`MAX_BLOCK_LEN`]; [`DEFAULT_BLOCK_LEN`](super::DEFAULT_BLOCK_LEN) unless measured otherwise).
    pub fn new(block_len: u32) -> Result<Self, EncodeError> {
        TableWriter::with_writer(Vec::new(), block_len)
    }
}

impl<W: Write> TableWriter<W> {
    /// A writer that streams the table section into `out`.
    pub fn with_writer(out: W, block_len: u32) -> Result<Self, EncodeError> {
        if block_len == 0 || block_len > MAX_BLOCK_LEN {
            return Err(EncodeError::Invalid(
                "the block length must be between 1 and 4096 keys",
            ));
        }
        let block_len = block_len as usize;
        Ok(TableWriter {
            sink: Sink::counting(out),
            block_len,
            pending: Vec::with_capacity(block_len),
            last: None,
            count: 0,
            index: Vec::new(),
            scratch: Vec::new(),
        })
    }

    /// Appends `key`, which must be greater than every key pushed before.
    pub fn push(&mut self, key: u64) -> Result<(), EncodeError> {
        if let Some(prev) = self.last
            && key <= prev
        {
            return Err(EncodeError::KeysNotIncreasing { prev, key });
        }
        self.last = Some(key);
        self.pending.push(key);
        self.count += 1;
        if self.pending.len() == self.block_len {
            self.flush_block()?;
        }
        Ok(())
    }

    /// Keys pushed so far.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether no key was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn flush_block(&mut self) -> Result<(), EncodeError> {
        let Some(&first) = self.pending.first() else {
            return Ok(());
        };
        self.index.extend_from_slice(&first.to_le_bytes());
        self.index
            .extend_from_slice(&self.sink.written().to_le_bytes());
        self.scratch.clear();
        encode_block(&self.pending, &mut self.scratch);
        self.pending.clear();
        Ok(self.sink.write_all(&self.scratch)?)
    }

    /// Writes the last block, the block index and the footer; returns the
    /// writer.
    pub fn finish(mut self) -> Result<W, EncodeError> {
        self.flush_block()?;
        let index_offset = self.sink.written();
        self.sink.write_all(&self.index)?;
        let mut footer = Vec::with_capacity(FOOTER_LEN);
        footer.extend_from_slice(&self.count.to_le_bytes());
        footer.extend_from_slice(&index_offset.to_le_bytes());
        footer.extend_from_slice(&(self.block_len as u32).to_le_bytes());
        footer.extend_from_slice(&crc32(&self.index).to_le_bytes());
        let footer_crc = crc32(&footer);
        footer.extend_from_slice(&footer_crc.to_le_bytes());
        self.sink.write_all(&footer)?;
        Ok(self.sink.into_inner())
    }
}
