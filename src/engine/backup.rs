//! Online backup: [`Index::backup`] and [`Index::backup_dir`] write a
//! consistent copy of an index into a new directory.
//!
//! A backup is a manifest, hard links to the segments' files (immutable
//! once published, docs/FORMAT.md "File names") and copies of the WALs the
//! manifest names, each cut at a frame boundary. It is built in a
//! temporary directory beside the destination, synced, and renamed into
//! place, so the destination holds a complete backup or nothing.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::{FileKind, Manifest, WalEnd, WalReader};

use super::core::{lock, read_lock};
use super::files::{corrupted, io_error};
use super::index::Index;
use super::lock::{DirLock, LockError};
use super::segment::Segment;

/// What [`Index::backup`] and [`Index::backup_dir`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackupReport {
    /// The backup's directory (the destination given).
    pub dest: PathBuf,
    /// Files hard-linked to the index's own (segments and doc maps).
    pub linked: usize,
    /// Files copied: the WALs, the manifest, and the segment files that
    /// could not be linked (another file system).
    pub copied: usize,
    /// Bytes of the backup's files, linked and copied.
    pub bytes: u64,
    /// Bytes written (the copied files).
    pub copied_bytes: u64,
    /// The backup holds every write numbered below this sequence number:
    /// the writer's next one when the backup began.
    pub next_seq: u64,
    /// The generation of the manifest the backup was taken from.
    pub generation: u64,
}

/// The prefix of the temporary directory of a backup to `dest`, beside it:
/// `.<dest's name>.backup-tmp.` followed by the process id and a counter.
fn temp_prefix(dest_name: &str) -> String {
    format!(".{dest_name}.backup-tmp.")
}

/// How many times [`Index::backup_dir`] starts over when the index changes
/// under it (a file it was about to copy removed by a flush or a merge).
const ATTEMPTS: usize = 100;

/// A WAL to copy: its id, an open handle (which keeps its bytes readable
/// even if a flush removes its name meanwhile), and the length to copy.
struct WalSource {
    id: u64,
    path: PathBuf,
    file: File,
    len: u64,
}

/// What a backup copies, taken at its point.
struct Snapshot {
    manifest: Manifest,
    /// The segments' `.seg` and `.ids` paths.
    segment_files: Vec<PathBuf>,
    wals: Vec<WalSource>,
    next_seq: u64,
}

impl Index {
    /// Writes a consistent copy of the index into `dest`, a path that must
    /// not exist or be an empty directory (anything else is refused, and
    /// nothing is written). The copy is an index of its own: it opens,
    /// verifies, and answers exactly as this index did when the backup
    /// began; every write acknowledged before the call is in it.
    ///
    /// The segments' files are hard-linked where the file system allows
    /// (they are never modified once written), else copied (`dest` on
    /// another file system); the WALs are copied up to the last write
    /// acknowledged before the call, and a manifest naming all of them is
    /// written. Writes wait only while the backup takes its list of files
    /// and the WALs' lengths (microseconds); linking and copying run beside
    /// them. Segments a merge replaces meanwhile keep their files until the
    /// backup has linked them.
    ///
    /// The files are built in a temporary directory beside `dest`
    /// (`.<name>.backup-tmp.<pid>.<n>`), synced, and renamed to `dest`, whose
    /// parent directory is then synced: `dest` holds a complete backup or
    /// does not exist, even if the process is killed. A killed backup
    /// leaves its temporary directory; the next backup to a destination of
    /// the same name removes it (it holds only links and copies).
    ///
    /// On a read-only index this is [`Index::backup_dir`] of its directory.
    /// The files are read and written through the operating system: an
    /// index opened over another [`FileSystem`](super::fs::FileSystem)
    /// ([`Options::file_system`](super::Options::file_system)) gets an
    /// [`Error::Io`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `dest` exists and is not an empty
    /// directory, or lies inside the index's directory; [`Error::Poisoned`]
    /// if an earlier write failed; [`Error::Io`] naming the file if a
    /// link, copy or sync fails (the temporary directory is then removed).
    pub fn backup(&self, dest: impl AsRef<Path>) -> Result<BackupReport> {
        let dest = dest.as_ref();
        if self.read_only {
            return Index::backup_dir(self.dir(), dest);
        }
        let target = Target::prepare(self.dir(), dest)?;
        let (snapshot, keep) = self.snapshot()?;
        let result = target.write(&snapshot);
        // What the backup kept alive may be the last reader of a segment a
        // merge replaced.
        drop(keep);
        self.core.remove_retired();
        result
    }

    /// The state to back up: taken under the writer lock (so the WALs end
    /// at a frame boundary, after every acknowledged write) and the
    /// manifest's lock (so the segments are those the manifest names).
    /// Returns the segments too, which keep their files from a merge's
    /// removal until dropped.
    fn snapshot(&self) -> Result<(Snapshot, Vec<Arc<Segment>>)> {
        let writer = self.writer()?;
        let next_seq = writer.as_ref().ok_or(Error::ReadOnly)?.next_seq;
        let committed = lock(&self.core.manifest);
        let manifest = committed.clone();
        let segments = read_lock(&self.core.state).segments.clone();
        let mut wals = Vec::with_capacity(manifest.wal_ids.len());
        for &id in &manifest.wal_ids {
            let path = self.dir().join(FileKind::Wal.file_name(id));
            let file = File::open(&path).map_err(io_error(&path, "open"))?;
            let len = file.metadata().map_err(io_error(&path, "read"))?.len();
            wals.push(WalSource {
                id,
                path,
                file,
                len,
            });
        }
        drop(committed);
        drop(writer);
        let mut segment_files = Vec::with_capacity(2 * manifest.segments.len());
        for meta in &manifest.segments {
            let segment = segments
                .iter()
                .find(|s| s.meta.id == meta.id)
                .ok_or_else(|| Error::Corrupted {
                    path: self.dir().join(FileKind::Manifest.file_name(0)),
                    offset: 0,
                    reason: format!(
                        "the manifest names segment {:016x}, which the index does not hold",
                        meta.id
                    ),
                })?;
            segment_files.push(segment.seg_path.clone());
            segment_files.push(segment.ids_path.clone());
        }
        let snapshot = Snapshot {
            manifest,
            segment_files,
            wals,
            next_seq,
        };
        Ok((snapshot, segments))
    }

    /// Writes a consistent copy of the index in directory `dir` into `dest`
    /// as [`Index::backup`] does, without opening the index and without
    /// taking its lock: it works while another process (a `simhashdb
    /// serve`) writes to it, and never changes a file of it.
    ///
    /// It reads `MANIFEST`, links the segments' files it names, and copies
    /// the WALs it names up to their last complete frame (a frame being
    /// appended meanwhile is left out: it was not acknowledged before the
    /// backup began). Every file is obtained whole or not at all: a link
    /// or open that finds a file gone (a flush or merge committed
    /// meanwhile and removed it) starts over from a fresh `MANIFEST`, up to
    /// 100 times. Once linked or opened, a file's bytes stay readable.
    /// Every write the other process acknowledged before the call is in the
    /// copy: a WAL is named by the manifest before anything is written to
    /// it, and only ever appended to.
    ///
    /// # Errors
    ///
    /// As [`Index::backup`]; also [`Error::Corrupted`] if a WAL holds
    /// damage before its end (the copy would drop acknowledged writes), and
    /// [`Error::Io`] if the index changed under every attempt.
    pub fn backup_dir(dir: impl AsRef<Path>, dest: impl AsRef<Path>) -> Result<BackupReport> {
        let dir = dir.as_ref();
        let target = Target::prepare(dir, dest.as_ref())?;
        for _ in 0..ATTEMPTS {
            match snapshot_files(dir, &target)? {
                Some(report) => return Ok(report),
                None => continue,
            }
        }
        Err(Error::Io {
            path: dir.to_path_buf(),
            op: "back up",
            source: io::Error::other(format!(
                "the index's files changed under each of {ATTEMPTS} attempts; back it up \
                 through the process that has it open (Index::backup, POST /v1/backup)"
            )),
        })
    }
}

/// One attempt of [`Index::backup_dir`]: `None` if a file the manifest
/// named was gone.
fn snapshot_files(dir: &Path, target: &Target) -> Result<Option<BackupReport>> {
    let manifest_path = dir.join(FileKind::Manifest.file_name(0));
    let bytes = fs::read(&manifest_path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => Error::Io {
            path: manifest_path.clone(),
            op: "read",
            source: io::Error::new(
                io::ErrorKind::NotFound,
                "no index here: the directory has no MANIFEST",
            ),
        },
        _ => io_error(&manifest_path, "read")(e),
    })?;
    let manifest = Manifest::decode(&bytes).map_err(|e| corrupted(&manifest_path, &e))?;
    let mut wals = Vec::with_capacity(manifest.wal_ids.len());
    for &id in &manifest.wal_ids {
        let path = dir.join(FileKind::Wal.file_name(id));
        match File::open(&path) {
            Ok(file) => {
                let len = file.metadata().map_err(io_error(&path, "read"))?.len();
                wals.push(WalSource {
                    id,
                    path,
                    file,
                    len,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_error(&path, "open")(e)),
        }
    }
    let mut segment_files = Vec::with_capacity(2 * manifest.segments.len());
    for meta in &manifest.segments {
        segment_files.push(dir.join(FileKind::Segment.file_name(meta.id)));
        segment_files.push(dir.join(FileKind::DocMap.file_name(meta.id)));
    }
    let snapshot = Snapshot {
        next_seq: manifest.next_seq,
        manifest,
        segment_files,
        wals,
    };
    match target.write_unlocked(&snapshot) {
        Err(Gone) => Ok(None),
        Ok(result) => result.map(Some),
    }
}

/// A file the manifest named was gone when the backup came to it.
struct Gone;

/// Where a backup goes: the destination, checked, and the temporary
/// directory beside it that is renamed to it.
struct Target {
    dest: PathBuf,
    parent: PathBuf,
    prefix: String,
}

impl Target {
    /// Checks `dest` (not an existing non-empty directory or other file,
    /// not inside `dir`), creates its parent if needed, and removes the
    /// temporary directories of killed backups to a destination of the
    /// same name.
    fn prepare(dir: &Path, dest: &Path) -> Result<Target> {
        let refuse = |why: String| {
            Error::InvalidArgument(format!(
                "cannot back up to {}: {why}; nothing was written",
                dest.display()
            ))
        };
        let Some(name) = dest.file_name().and_then(|n| n.to_str()) else {
            return Err(refuse("the path must end in a UTF-8 directory name".into()));
        };
        check_dest(dest).map_err(refuse)?;
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let index_dir = dir.canonicalize().map_err(io_error(dir, "read"))?;
        // Checked before any missing parent is created.
        let existing = parent
            .ancestors()
            .find(|a| a.exists())
            .unwrap_or(Path::new("."));
        let existing_real = existing
            .canonicalize()
            .map_err(io_error(existing, "read"))?;
        if existing_real.starts_with(&index_dir) {
            return Err(refuse(format!(
                "it lies inside the index's directory {}",
                dir.display()
            )));
        }
        fs::create_dir_all(&parent).map_err(io_error(&parent, "create directory"))?;
        let target = Target {
            dest: dest.to_path_buf(),
            parent,
            prefix: temp_prefix(name),
        };
        target.remove_stale();
        Ok(target)
    }

    /// Removes the temporary directories that killed backups to this
    /// destination left (best effort). One whose lock is held belongs to a
    /// backup still running, and is left alone.
    fn remove_stale(&self) {
        let Ok(entries) = fs::read_dir(&self.parent) else {
            return;
        };
        for entry in entries.flatten() {
            let is_ours = entry
                .file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&self.prefix));
            if !is_ours {
                continue;
            }
            let path = entry.path();
            match DirLock::exclusive(&path) {
                Ok(held) => {
                    let _ = fs::remove_dir_all(&path);
                    drop(held);
                }
                Err(LockError::Locked { .. } | LockError::Io { .. }) => {}
            }
        }
    }

    /// Writes `snapshot` with the index's lock held by this process: every
    /// file it names exists.
    fn write(&self, snapshot: &Snapshot) -> Result<BackupReport> {
        match self.write_unlocked(snapshot) {
            Ok(result) => result,
            Err(Gone) => Err(Error::Io {
                path: self.dest.clone(),
                op: "back up",
                source: io::Error::other(
                    "a file of the index disappeared during the backup; nothing was written",
                ),
            }),
        }
    }

    /// Writes `snapshot` into a new temporary directory and renames it to
    /// the destination. `Err(Gone)` (the temporary directory removed) if a
    /// file it names no longer exists.
    fn write_unlocked(
        &self,
        snapshot: &Snapshot,
    ) -> std::result::Result<Result<BackupReport>, Gone> {
        let temp = match self.create_temp() {
            Ok(temp) => temp,
            Err(e) => return Ok(Err(e)),
        };
        let result = self.fill(&temp.0, snapshot);
        let result = match result {
            Ok(Ok(report)) => self.commit(&temp.0).map(|()| report),
            Ok(Err(e)) => Err(e),
            Err(Gone) => {
                let _ = fs::remove_dir_all(&temp.0);
                return Err(Gone);
            }
        };
        if result.is_err() {
            let _ = fs::remove_dir_all(&temp.0);
        }
        Ok(result)
    }

    /// A new temporary directory, locked by this process until dropped.
    fn create_temp(&self) -> Result<(PathBuf, DirLock)> {
        static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        loop {
            let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = self
                .parent
                .join(format!("{}{}.{n}", self.prefix, std::process::id()));
            match fs::create_dir(&path) {
                Ok(()) => {
                    let held = DirLock::exclusive(&path).map_err(super::files::lock_error)?;
                    return Ok((path, held));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_error(&path, "create directory")(e)),
            }
        }
    }

    /// Links or copies every file of `snapshot` into `temp`, and writes its
    /// manifest; everything synced.
    fn fill(
        &self,
        temp: &Path,
        snapshot: &Snapshot,
    ) -> std::result::Result<Result<BackupReport>, Gone> {
        let mut report = BackupReport {
            dest: self.dest.clone(),
            linked: 0,
            copied: 0,
            bytes: 0,
            copied_bytes: 0,
            next_seq: snapshot.next_seq,
            generation: snapshot.manifest.generation,
        };
        for source in &snapshot.segment_files {
            let Some(name) = source.file_name() else {
                continue;
            };
            match link_or_copy(source, &temp.join(name)) {
                Ok(Some((linked, bytes))) => {
                    report.bytes += bytes;
                    if linked {
                        report.linked += 1;
                    } else {
                        report.copied += 1;
                        report.copied_bytes += bytes;
                    }
                }
                Ok(None) => return Err(Gone),
                Err(e) => return Ok(Err(e)),
            }
        }
        for wal in &snapshot.wals {
            let path = temp.join(FileKind::Wal.file_name(wal.id));
            match copy_wal(wal, &path) {
                Ok((bytes, last_seq)) => {
                    report.copied += 1;
                    report.bytes += bytes;
                    report.copied_bytes += bytes;
                    if let Some(seq) = last_seq {
                        report.next_seq = report.next_seq.max(seq + 1);
                    }
                }
                Err(e) => return Ok(Err(e)),
            }
        }
        let result = snapshot
            .manifest
            .encode()
            .map_err(|e| Error::InvalidArgument(e.to_string()))
            .and_then(|bytes| {
                let path = temp.join(FileKind::Manifest.file_name(0));
                write_synced(&path, &bytes)?;
                report.copied += 1;
                report.bytes += bytes.len() as u64;
                report.copied_bytes += bytes.len() as u64;
                sync_dir(temp)
            });
        Ok(result.map(|()| report))
    }

    /// Renames `temp` to the destination (only over nothing or an empty
    /// directory) and syncs the parent directory.
    fn commit(&self, temp: &Path) -> Result<()> {
        // Checked again: the destination may have appeared meanwhile.
        // rename(2) itself refuses a non-empty directory.
        if let Err(why) = check_dest(&self.dest) {
            return Err(Error::InvalidArgument(format!(
                "cannot back up to {}: {why}; nothing was written",
                self.dest.display()
            )));
        }
        fs::rename(temp, &self.dest).map_err(|e| match e.kind() {
            io::ErrorKind::DirectoryNotEmpty | io::ErrorKind::NotADirectory => {
                Error::InvalidArgument(format!(
                    "cannot back up to {}: it appeared during the backup and is not an empty \
                     directory; nothing was written",
                    self.dest.display()
                ))
            }
            _ => io_error(&self.dest, "rename")(e),
        })?;
        sync_dir(&self.parent)
    }
}

/// `Err(why)` if `dest` exists and is not an empty directory.
fn check_dest(dest: &Path) -> std::result::Result<(), String> {
    match fs::symlink_metadata(dest) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot read it ({e})")),
        Ok(meta) if !meta.is_dir() => Err("it exists and is not a directory".into()),
        Ok(_) => {
            let mut entries = fs::read_dir(dest).map_err(|e| format!("cannot list it ({e})"))?;
            match entries.next() {
                None => Ok(()),
                Some(entry) => {
                    let name = entry.map_or_else(
                        |_| "?".to_string(),
                        |e| e.file_name().to_string_lossy().into_owned(),
                    );
                    Err(format!(
                        "it is a directory that is not empty (found {name}); give a new path \
                         or an empty directory"
                    ))
                }
            }
        }
    }
}

/// Hard-links `source` to `dest`, or copies it (synced) where the file
/// system cannot link them (another device, no hard links). Returns whether
/// it was linked and its length, or `None` if `source` does not exist.
fn link_or_copy(source: &Path, dest: &Path) -> Result<Option<(bool, u64)>> {
    match fs::hard_link(source, dest) {
        Ok(()) => {
            let len = fs::metadata(dest).map_err(io_error(dest, "read"))?.len();
            return Ok(Some((true, len)));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if !cannot_link(&e) => return Err(io_error(dest, "link")(e)),
        Err(_) => {}
    }
    let mut from = match File::open(source) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(source, "open")(e)),
    };
    let mut to = create_new(dest)?;
    let len = io::copy(&mut from, &mut to).map_err(io_error(dest, "write"))?;
    to.sync_all().map_err(io_error(dest, "sync"))?;
    Ok(Some((false, len)))
}

/// Whether a hard link failed because the file system cannot make it
/// (another device, or links not supported), so a copy is in order.
fn cannot_link(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::CrossesDevices
            | io::ErrorKind::Unsupported
            | io::ErrorKind::PermissionDenied
            | io::ErrorKind::TooManyLinks
    )
}

/// Copies `wal.len` bytes of the WAL, cut after its last complete frame,
/// to `dest` (synced). Returns the bytes written and the sequence number of
/// its last record.
fn copy_wal(wal: &WalSource, dest: &Path) -> Result<(u64, Option<u64>)> {
    let source = &wal.path;
    let mut bytes = Vec::new();
    (&wal.file)
        .take(wal.len)
        .read_to_end(&mut bytes)
        .map_err(io_error(source, "read"))?;
    let reader = WalReader::new(&bytes).map_err(|e| corrupted(source, &e))?;
    let (frames, end) = reader.read_all();
    let cut = match end {
        WalEnd::Clean | WalEnd::TornTail { .. } => frames
            .last()
            .map_or(crate::format::wal::WAL_HEADER_LEN as u64, |f| f.end),
        WalEnd::Unparsable { error } | WalEnd::Corrupted { error, .. } => {
            return Err(corrupted(source, &error));
        }
    };
    let last_seq = frames
        .last()
        .and_then(|f| f.records.last())
        .map(crate::format::Record::seq);
    let cut_len = usize::try_from(cut).unwrap_or(bytes.len()).min(bytes.len());
    write_synced(dest, &bytes[..cut_len])?;
    Ok((cut_len as u64, last_seq))
}

fn create_new(path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_error(path, "create"))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = create_new(path)?;
    file.write_all(bytes).map_err(io_error(path, "write"))?;
    file.sync_all().map_err(io_error(path, "sync"))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error(dir, "sync"))
}
