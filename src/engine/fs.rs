//! The file-system layer under the engine.
//!
//! Every file-system call of the engine goes through [`FileSystem`], so that
//! tests can swap [`RealFs`] for `engine::fault::FaultFs` (with the
//! `fault-injection` feature), which injects errors and simulates power loss.
//!
//! # Durability
//!
//! Three levels, in the order data climbs them:
//!
//! 1. **Visible.** When a call returns `Ok`, its effect is visible to every
//!    later call, and it survives the process being killed: the operating
//!    system holds it.
//! 2. **Durable contents.** [`WritableFile::sync`] makes the file's bytes
//!    (and its length) survive power loss. It does not make the file's *name*
//!    durable.
//! 3. **Durable names.** Creating, renaming and removing a file (and creating
//!    a directory) change a directory entry. Such a change survives power loss
//!    only once [`FileSystem::sync_dir`] of the parent directory has returned
//!    `Ok` afterwards; a rename between directories needs both parents synced.
//!
//! A file that was synced but whose directory entry was not can vanish on power
//! loss; a rename that was not followed by a directory sync can be undone.
//! Publishing a file therefore takes: write, `sync`, rename (or create in
//! place), `sync_dir`.
//!
//! A failed `sync` (or `sync_dir`) means the bytes written since the last
//! successful one may never reach the disk, even if a later sync succeeds:
//! Linux marks the pages clean after a write-back error and reports it once.
//! Treat the file (and the writer) as poisoned.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;
#[cfg(feature = "fault-injection")]
use std::sync::Weak;

/// The file-system calls of the engine. Object safe: the engine holds an
/// `Arc<dyn FileSystem>`.
///
/// Paths are used as given; implementations do not resolve them against a root.
pub trait FileSystem: Send + Sync + fmt::Debug {
    /// Creates `dir` and any missing parents. Succeeds if it already exists.
    ///
    /// A newly created directory's name is durable once its parent has been
    /// synced with [`sync_dir`](Self::sync_dir); files inside a directory whose
    /// own entry was lost are lost with it.
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;

    /// Creates the new file `path` and opens it for appending (every write
    /// goes to the end of the file). Fails with
    /// [`io::ErrorKind::AlreadyExists`] if `path` exists: the engine never
    /// overwrites or truncates a file by creating it (`O_CREAT | O_EXCL`).
    /// The parent directory must exist.
    ///
    /// Contents are durable after [`WritableFile::sync`]; the name after
    /// [`sync_dir`](Self::sync_dir) of the parent.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;

    /// Opens the existing file `path` to append to its end (a WAL after
    /// recovery). Fails with [`io::ErrorKind::NotFound`] if it does not exist.
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;

    /// Reads the whole file: for small files (manifest, WAL replay).
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;

    /// Maps the whole file read-only.
    ///
    /// Only for published files, which are never written, truncated or
    /// recreated in place while a mapping of them is alive. The mapping stays
    /// valid after the file is removed or renamed over.
    fn map(&self, path: &Path) -> io::Result<Mapped>;

    /// Atomically renames `from` to `to`, replacing `to` if it exists.
    ///
    /// Visible at once; durable after [`sync_dir`](Self::sync_dir) of the
    /// parent directory (of both, if they differ). Until then power loss may
    /// leave the old name and the old target.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;

    /// Removes the file `path`. Open writers and live mappings of it keep
    /// working. Durable after [`sync_dir`](Self::sync_dir) of the parent.
    fn remove(&self, path: &Path) -> io::Result<()>;

    /// Makes every directory-entry change in `dir` (creations, renames,
    /// removals of its direct children) durable. Says nothing about the
    /// contents of the files, nor about `dir`'s own entry in its parent.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;

    /// The names (not full paths) of the entries of `dir`, files and
    /// directories, sorted.
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;

    /// Sets the length of the file `path`: drops the bytes past `len`, or
    /// appends zeros up to it. Used to cut a torn WAL tail before appending.
    ///
    /// Like a write: visible at once, durable after the next
    /// [`WritableFile::sync`] of a writer on the same file.
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()>;

    /// The current length of the file `path`, in bytes.
    fn len(&self, path: &Path) -> io::Result<u64>;

    /// The bytes of the file `path` from `offset` to its end (none if it
    /// is shorter): what a reader's refresh reads of a WAL that grew.
    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        let bytes = self.read(path)?;
        let from = usize::try_from(offset).unwrap_or(usize::MAX);
        Ok(bytes.get(from..).unwrap_or_default().to_vec())
    }

    /// Whether the engine may flush and merge on background threads over
    /// this file system. A simulated one must not let a thread go on writing
    /// after a simulated crash, so the default is no: flushes and merges then
    /// run on the writing thread, in one order.
    fn background_threads(&self) -> bool {
        false
    }
}

/// An append-only writer returned by [`FileSystem::create_new`] and
/// [`FileSystem::open_append`].
pub trait WritableFile: Send + fmt::Debug {
    /// Appends all of `buf`. Visible, and survives a process kill, once it
    /// returns `Ok`; durable only after [`sync`](Self::sync).
    ///
    /// On error an unknown prefix of `buf` may have been written; the writer
    /// should not be used again.
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()>;

    /// Makes the file's contents and length durable (`fdatasync`). On error
    /// the bytes written since the last successful sync may be lost for good,
    /// whatever later syncs return: the writer is poisoned.
    fn sync(&mut self) -> io::Result<()>;

    /// The file's length as seen through this writer: its length when opened
    /// plus the bytes written through it, if nothing else changed the file
    /// (after a failed write, what the file system reports).
    fn len(&self) -> u64;

    /// Whether [`len`](Self::len) is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the file still has a name in a directory (a link count above
    /// 0). One whose directory was removed under the writer (`rm -rf`) has
    /// none: what it holds goes with the last handle, however often it is
    /// synced. A file system that cannot tell answers yes.
    fn linked(&self) -> io::Result<bool> {
        Ok(true)
    }
}

/// The most bytes [`Mapped::read_range_until`] asks the kernel for in one
/// `MADV_WILLNEED`: the kernel reads at most the device's read-ahead
/// window or its largest request per call (128 KiB and 1.25 MiB on many
/// disks), the rest of a longer range being dropped.
const READ_AHEAD_PIECE: usize = 512 << 10;

/// The bytes [`Mapped::read_range_until`] asks for ahead of those it maps
/// (so at most twice as many are being read at once).
const READ_AHEAD_WINDOW: usize = 4 << 20;

/// A read-only view of a whole file, cheap to clone; the bytes stay valid for
/// as long as any clone is alive, even after the file is removed.
#[derive(Clone)]
pub struct Mapped(Arc<MapInner>);

enum MapInner {
    /// A memory map of a non-empty file.
    Mmap(memmap2::Mmap),
    /// Bytes held in memory: empty files (which cannot be mapped) and
    /// in-memory file systems.
    Owned(Box<[u8]>),
}

impl Mapped {
    /// Bytes held in memory, for file systems that do not map real files.
    pub fn from_vec(bytes: Vec<u8>) -> Mapped {
        Mapped(Arc::new(MapInner::Owned(bytes.into_boxed_slice())))
    }

    /// Asks the kernel to map every page now (Linux 5.14+; elsewhere, or on
    /// failure, nothing happens): the first query to touch a page then finds
    /// it mapped instead of taking a page fault. The pages stay evictable.
    ///
    /// The kernel holds the process's address-space lock while it maps, so
    /// this goes 16 MiB at a time: another thread's `mmap` (a large
    /// allocation, say) waits for one piece, not for gigabytes.
    pub fn prefault(&self) {
        self.prefault_until(|| false);
    }

    /// [`prefault`](Self::prefault), stopping early once `stop` returns true
    /// (asked between pieces).
    pub fn prefault_until(&self, stop: impl Fn() -> bool) {
        self.prefault_range_until(0..self.len(), stop);
    }

    /// [`prefault_until`](Self::prefault_until) for the bytes in `range`
    /// only (clamped to the mapping; whole pages around it are mapped).
    /// Returns true if it went through the whole range, false if `stop`
    /// stopped it or the kernel failed (an I/O error, say).
    ///
    /// A kernel that refuses the advice (`EINVAL`: Linux before 5.14)
    /// gets the pages touched instead, a byte of each 4 KiB read, which
    /// maps them too. Elsewhere nothing happens (and it returns true).
    pub fn prefault_range_until(
        &self,
        range: std::ops::Range<usize>,
        stop: impl Fn() -> bool,
    ) -> bool {
        self.populate_until(range, false, stop)
    }

    /// [`prefault_range_until`](Self::prefault_range_until) for a mapping
    /// advised to be read at random ([`advise_reads`](Self::advise_reads)),
    /// where a page fault reads its own page only, so that mapping the
    /// range page by page would wait for one disk read per 4 KiB: each
    /// piece of `READ_AHEAD_WINDOW` bytes (4 MiB) is asked for
    /// (`MADV_WILLNEED`, in reads of up to `READ_AHEAD_PIECE` bytes, 512
    /// KiB, that the disk serves together) while the piece before it is
    /// mapped (docs/BENCHMARKS.md, "Issue 41: one wait for the disk per
    /// query out of memory").
    pub fn read_range_until(&self, range: std::ops::Range<usize>, stop: impl Fn() -> bool) -> bool {
        self.populate_until(range, true, stop)
    }

    fn populate_until(
        &self,
        range: std::ops::Range<usize>,
        ask_ahead: bool,
        stop: impl Fn() -> bool,
    ) -> bool {
        #[cfg(target_os = "linux")]
        if let MapInner::Mmap(map) = &*self.0 {
            const EINVAL: i32 = 22;
            let mut refused = false;
            // Asked ahead, a piece is read while the one before is mapped:
            // a smaller one keeps fewer large reads queued ahead of the
            // first queries' own.
            let piece: usize = if ask_ahead {
                READ_AHEAD_WINDOW
            } else {
                16 << 20
            };
            // memmap2 widens each piece to whole pages.
            let (start, end) = (range.start.min(map.len()), range.end.min(map.len()));
            let ask = |from: usize| {
                let to = from.saturating_add(piece).min(end);
                for at in (from..to).step_by(READ_AHEAD_PIECE) {
                    self.will_need(at..at.saturating_add(READ_AHEAD_PIECE).min(to));
                }
            };
            if ask_ahead {
                ask(start);
            }
            for offset in (start..end).step_by(piece) {
                if stop() {
                    return false;
                }
                if ask_ahead {
                    ask(offset.saturating_add(piece));
                }
                let len = piece.min(end - offset);
                if !refused {
                    match map.advise_range(memmap2::Advice::PopulateRead, offset, len) {
                        Ok(()) => continue,
                        Err(e) if e.raw_os_error() == Some(EINVAL) => refused = true,
                        Err(_) => return false,
                    }
                }
                let bytes = map.get(offset..offset + len).unwrap_or_default();
                let mut sum = 0u8;
                for page in bytes.chunks(4096) {
                    sum ^= page.first().copied().unwrap_or(0);
                }
                std::hint::black_box(sum);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (range, ask_ahead, stop);
        true
    }

    /// Asks the kernel to start reading the pages of `range` from the file
    /// (`MADV_WILLNEED`) and returns without waiting: several ranges asked
    /// for in a row are read at once, instead of one page fault after
    /// another. Nothing happens where the advice is refused or the bytes
    /// are not mapped.
    pub fn will_need(&self, range: std::ops::Range<usize>) {
        if let MapInner::Mmap(map) = &*self.0 {
            let (start, end) = (range.start.min(map.len()), range.end.min(map.len()));
            if start < end {
                let _ = map.advise_range(memmap2::Advice::WillNeed, start, end - start);
            }
        }
    }

    /// Tells the kernel how the pages will be read: at random
    /// (`MADV_RANDOM`: a page fault reads its page only, not the pages
    /// around it too) or in order (`MADV_SEQUENTIAL`: faults read far
    /// ahead). Nothing happens where the advice is refused or the bytes are
    /// not mapped.
    pub fn advise_reads(&self, at_random: bool) {
        if let MapInner::Mmap(map) = &*self.0 {
            let advice = if at_random {
                memmap2::Advice::Random
            } else {
                memmap2::Advice::Sequential
            };
            let _ = map.advise(advice);
        }
    }

    /// A token that tells whether any clone of this mapping is still alive.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn liveness(&self) -> MapLiveness {
        MapLiveness(Arc::downgrade(&self.0))
    }
}

impl Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &*self.0 {
            MapInner::Mmap(map) => map,
            MapInner::Owned(bytes) => bytes,
        }
    }
}

impl AsRef<[u8]> for Mapped {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl fmt::Debug for Mapped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &*self.0 {
            MapInner::Mmap(_) => "mmap",
            MapInner::Owned(_) => "owned",
        };
        f.debug_struct("Mapped")
            .field("len", &self.len())
            .field("kind", &kind)
            .finish()
    }
}

/// Whether a [`Mapped`] (or a clone of it) is still alive, without keeping it
/// alive.
#[cfg(feature = "fault-injection")]
#[derive(Debug, Clone)]
pub(crate) struct MapLiveness(Weak<MapInner>);

#[cfg(feature = "fault-injection")]
impl MapLiveness {
    pub(crate) fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// The operating system's file system, through `std::fs` and `memmap2`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl FileSystem for RealFs {
    fn background_threads(&self) -> bool {
        true
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(path)?;
        Ok(Box::new(RealFile { file, len: 0 }))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new().append(true).open(path)?;
        let len = file.metadata()?.len();
        Ok(Box::new(RealFile { file, len }))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let mut file = File::open(path)?;
        file.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    fn map(&self, path: &Path) -> io::Result<Mapped> {
        let file = File::open(path)?;
        if file.metadata()?.len() == 0 {
            // mmap of length zero fails (EINVAL); an empty file has no bytes to share.
            return Ok(Mapped::from_vec(Vec::new()));
        }
        Ok(Mapped(Arc::new(MapInner::Mmap(map_published(&file)?))))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    #[cfg(unix)]
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }

    /// Other systems cannot open a directory as a file; their directory
    /// metadata durability is the file system's own business.
    #[cfg(not(unix))]
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::metadata(dir).map(drop)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            names.push(PathBuf::from(entry?.file_name()));
        }
        names.sort();
        Ok(names)
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        OpenOptions::new().write(true).open(path)?.set_len(len)
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }
}

/// Maps a published file: one of the library's four `unsafe` blocks (the
/// others are the prefetch hint in `format/bytes.rs`, which touches no
/// memory, and the calls of searches compiled for `popcnt` once the
/// processor is known to have it, in `engine/decoded.rs` and in
/// `batch.rs`'s scan of all pairs).
fn map_published(file: &File) -> io::Result<memmap2::Mmap> {
    // SAFETY: a mapping is undefined behaviour (or SIGBUS) if the file is
    // modified or truncated while mapped. The engine maps only published files,
    // and published files are never written, truncated or recreated in place:
    // they are removed only after no reader holds a mapping, and removing or
    // renaming over a mapped file leaves the mapping intact. The engine checks
    // a file's length against its footer before reading any other byte.
    unsafe { memmap2::Mmap::map(file) }
}

/// A writer on a real file. Writes go straight to the OS, unbuffered: callers
/// batch their records into one `write_all`.
#[derive(Debug)]
struct RealFile {
    file: File,
    len: u64,
}

impl WritableFile for RealFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self.file.write_all(buf) {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(err) => {
                if let Ok(meta) = self.file.metadata() {
                    self.len = meta.len();
                }
                Err(err)
            }
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn linked(&self) -> io::Result<bool> {
        linked(&self.file)
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// Whether `file` still has a name in some directory (a link count above 0).
#[cfg(unix)]
fn linked(file: &File) -> io::Result<bool> {
    use std::os::unix::fs::MetadataExt;
    Ok(file.metadata()?.nlink() > 0)
}

#[cfg(not(unix))]
fn linked(_: &File) -> io::Result<bool> {
    Ok(true)
}

/// The memory this process can fill, in bytes: the machine's (`MemTotal`)
/// or, when smaller, its control group's limit (cgroup v2 `memory.max`, v1
/// `memory.limit_in_bytes`), whose page cache counts against it. `None`
/// where neither can be read (not Linux, say).
pub(super) fn memory_limit() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let groups = read("/proc/self/cgroup").unwrap_or_default();
    let limits = groups.lines().filter_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (hierarchy, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let file = if hierarchy == "0" && controllers.is_empty() {
            format!("/sys/fs/cgroup{path}/memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        } else {
            return None;
        };
        // "max" (v2) or a huge number (v1) when unlimited.
        read(&file)?.trim().parse::<u64>().ok()
    });
    limits.chain(mem_total()).min()
}

/// The bytes the calling thread has had read from the disk so far
/// (`read_bytes` of `/proc/thread-self/io`: its reads, page faults and
/// the read-ahead they start), or `None` where that cannot be read (not
/// Linux, or a kernel without I/O accounting).
pub(super) fn thread_disk_reads() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    let line = io.lines().find(|l| l.starts_with("read_bytes:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`).
fn mem_total() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod memory_tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn the_memory_limit_is_at_most_the_machine_s() {
        let total = super::mem_total().expect("/proc/meminfo has MemTotal");
        let limit = super::memory_limit().expect("MemTotal is readable, so a limit is known");
        assert!(limit <= total && limit > 0, "{limit} of {total}");
    }

    /// The open stops checking a segment's pages once it has read too
    /// many from the disk, which it learns from this count.
    #[test]
    #[cfg(target_os = "linux")]
    fn a_thread_s_disk_reads_are_counted() {
        let before = super::thread_disk_reads().expect("/proc/thread-self/io has read_bytes");
        let on_another = std::thread::spawn(super::thread_disk_reads).join().unwrap();
        assert!(on_another.is_some());
        assert!(super::thread_disk_reads().unwrap() >= before);
    }
}
