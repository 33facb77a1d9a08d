//! An in-memory [`FileSystem`] that injects errors and simulates crashes.
//!
//! For tests only, and only with the `fault-injection` feature (the crate's
//! own tests turn it on through their dev-dependency on the crate): add
//! `simhashdb = { version = "..", features = ["fault-injection"] }` to the
//! `[dev-dependencies]` of a crate that tests its use of the index under
//! crashes.
//!
//! [`FaultFs`] models the durability rules of [`super::fs`] exactly:
//!
//! - Every file keeps its *visible* bytes (what reads return) and its
//!   *durable* bytes (what the disk holds): the contents at its last
//!   successful [`WritableFile::sync`].
//! - Every directory entry (file or directory created, renamed, removed) is
//!   applied to the visible namespace at once and copied to the *durable*
//!   namespace by [`FileSystem::sync_dir`] of its parent. A file or directory
//!   whose parent's entry is not durable is not durable either.
//! - A failed sync marks the bytes it should have written as lost: they stay
//!   visible, but no later sync writes them, so after power loss they read as
//!   zeros (Linux's behaviour after a write-back error).
//!
//! [`FaultFs::crash`] turns the state into what a restarted process would see,
//! and the engine reopens on the same `FaultFs`:
//!
//! ```
//! use std::path::Path;
//! use simhashdb::engine::fault::{CrashMode, FaultFs, Unsynced};
//! use simhashdb::engine::fs::FileSystem;
//!
//! let fs = FaultFs::new();
//! let dir = Path::new("/db");
//! fs.create_dir_all(dir)?;
//! fs.sync_dir(Path::new("/"))?;
//! let mut wal = fs.create_new(&dir.join("0.wal"))?;
//! wal.write_all(b"synced")?;
//! wal.sync()?;
//! fs.sync_dir(dir)?;
//! wal.write_all(b" and not")?;
//! drop(wal);
//!
//! fs.crash(CrashMode::PowerLoss(Unsynced::Lost));
//! assert_eq!(fs.read(&dir.join("0.wal"))?, b"synced");
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Errors are injected by countdown ([`FaultFs::fail_after`],
//! [`FaultFs::inject`]); every operation is counted ([`FaultFs::op_count`]) so a
//! test can fail each operation of a workload in turn. To cut the power at
//! operation `n`, inject a sticky [`FaultKind::Eio`] after `n` operations, run
//! the workload, then [`crash`](FaultFs::crash).
//!
//! Everything is deterministic while one thread at a time drives it (a
//! background thread interleaves its operations with the caller's, which moves
//! the countdown): the only randomness (torn tails, short-write lengths) comes
//! from the seed given to [`FaultFs::with_seed`].
//!
//! Only the root (`/`, or `""` for relative paths) exists from the start and
//! is always durable. A directory made with [`FileSystem::create_dir_all`]
//! needs [`FileSystem::sync_dir`] of its parent, like any entry, or power loss
//! takes it and everything in it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::fs::{FileSystem, MapLiveness, Mapped, WritableFile};

/// A kind of file-system operation: what [`FaultFs::op_count`] counts and what
/// a [`Fault`] can aim at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`FileSystem::create_dir_all`].
    CreateDir,
    /// [`FileSystem::create_new`].
    Create,
    /// [`FileSystem::open_append`].
    OpenAppend,
    /// [`FileSystem::read`].
    Read,
    /// [`FileSystem::map`].
    Map,
    /// [`FileSystem::rename`].
    Rename,
    /// [`FileSystem::remove`].
    Remove,
    /// [`FileSystem::sync_dir`].
    SyncDir,
    /// [`FileSystem::list`].
    List,
    /// [`FileSystem::truncate`].
    Truncate,
    /// [`FileSystem::len`].
    Len,
    /// [`WritableFile::write_all`].
    Write,
    /// [`WritableFile::sync`].
    Sync,
}

impl Op {
    /// Every operation kind.
    pub const ALL: [Op; 13] = [
        Op::CreateDir,
        Op::Create,
        Op::OpenAppend,
        Op::Read,
        Op::Map,
        Op::Rename,
        Op::Remove,
        Op::SyncDir,
        Op::List,
        Op::Truncate,
        Op::Len,
        Op::Write,
        Op::Sync,
    ];

    fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// The error an injected fault produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// `EIO` from any operation, which then has no effect (a failed sync loses
    /// the bytes it should have written; see the module docs).
    Eio,
    /// `ENOSPC` ([`io::ErrorKind::StorageFull`]) from an operation that may
    /// allocate space: create, create_dir_all, write, sync, rename.
    NoSpace,
    /// A write that stores a strict prefix of its buffer (length drawn from
    /// the seeded generator, possibly zero) and then fails with `ENOSPC`.
    ShortWrite,
    /// `EIO` from a file or directory sync. The file's bytes written since its
    /// last successful sync are lost on power loss even if a later sync
    /// succeeds; the directory's pending entries stay pending.
    SyncFails,
}

impl FaultKind {
    /// Whether this kind of fault can hit operation `op`.
    pub fn applies_to(self, op: Op) -> bool {
        match self {
            FaultKind::Eio => true,
            FaultKind::NoSpace => matches!(
                op,
                Op::CreateDir | Op::Create | Op::Write | Op::Sync | Op::Rename
            ),
            FaultKind::ShortWrite => op == Op::Write,
            FaultKind::SyncFails => matches!(op, Op::Sync | Op::SyncDir),
        }
    }

    fn error(self) -> io::Error {
        match self {
            FaultKind::Eio | FaultKind::SyncFails => eio(),
            FaultKind::NoSpace | FaultKind::ShortWrite => enospc(),
        }
    }
}

/// An error to inject: which kind, at which matching operation, how often.
///
/// A fault *matches* an operation if the operation is in its set (all by
/// default, see [`on`](Self::on)) and its kind [applies
/// to](FaultKind::applies_to) it. Matching operations are counted down from
/// [`after`](Self::after); the next one fails.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    kind: FaultKind,
    ops: u16,
    skip: u64,
    sticky: bool,
}

impl Fault {
    /// Fails the first matching operation, once.
    pub fn new(kind: FaultKind) -> Fault {
        Fault {
            kind,
            ops: u16::MAX,
            skip: 0,
            sticky: false,
        }
    }

    /// Lets `n` matching operations succeed before failing one.
    pub fn after(mut self, n: u64) -> Fault {
        self.skip = n;
        self
    }

    /// Matches only the operations in `ops` (to which the kind applies).
    pub fn on(mut self, ops: &[Op]) -> Fault {
        self.ops = ops.iter().fold(0, |bits, op| bits | op.bit());
        self
    }

    /// Once it fires, fails every later matching operation too, until
    /// [`FaultFs::clear_faults`] or a crash: a full disk, a dead device.
    pub fn sticky(mut self) -> Fault {
        self.sticky = true;
        self
    }

    fn matches(&self, op: Op) -> bool {
        self.ops & op.bit() != 0 && self.kind.applies_to(op)
    }
}

/// What survives [`FaultFs::crash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CrashMode {
    /// The process is killed; the OS keeps everything: every visible byte and
    /// directory entry survives. Open writers and mappings die with the process.
    ProcessKill,
    /// The machine loses power: only durable directory entries survive; each
    /// file keeps its durable bytes and, per [`Unsynced`], some of the rest.
    PowerLoss(Unsynced),
}

/// Which unsynced file bytes survive power loss. Unsynced directory entries
/// never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unsynced {
    /// None: every file reverts to its last synced contents.
    Lost,
    /// All: the OS wrote every dirty byte back before the power went (bytes
    /// lost to a failed sync read as zeros).
    Kept,
    /// A torn tail: each appended-to file keeps its synced bytes plus a
    /// prefix, of random length, of the bytes appended since. A file that was
    /// truncated or overwritten since its last sync keeps either its old
    /// contents or such a prefix of its new ones.
    Torn,
    /// Write-back out of order: like [`Torn`](Self::Torn), but within the
    /// kept unsynced bytes each 4 KiB page (by file offset) either reached
    /// the disk or reads as zeros, at random: a file whose length reached the
    /// disk before some of its pages did.
    Scattered,
}

/// Something the engine must never do, recorded by [`FaultFs`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Violation {
    /// The path the file was opened, truncated or recreated by.
    pub path: PathBuf,
    /// What happened to it.
    pub kind: ViolationKind,
}

/// See [`Violation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViolationKind {
    /// Bytes were written to a file while a mapping of it was alive.
    WrittenWhileMapped,
    /// A file was truncated while a mapping of it was alive (on a real system readers would see the bytes
    /// change or fault with SIGBUS).
    TruncatedWhileMapped,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ViolationKind::WrittenWhileMapped => "written while mapped",
            ViolationKind::TruncatedWhileMapped => "truncated while mapped",
        };
        write!(f, "{}: {what}", self.path.display())
    }
}

/// An in-memory file system with exact durability, injected errors and
/// simulated crashes. See the [module docs](self).
///
/// Clones share one file system, so a test can keep a handle while the engine
/// holds another as an `Arc<dyn FileSystem>`.
#[derive(Clone, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
    /// Set on a handle of one process ([`FaultFs::process`]): the boot it
    /// was taken in. After a crash every call through it fails.
    process: Option<u64>,
}

impl FaultFs {
    /// An empty file system (only the root exists), with seed 0.
    pub fn new() -> FaultFs {
        FaultFs::with_seed(0)
    }

    /// An empty file system whose torn tails and short writes are drawn from
    /// `seed`.
    pub fn with_seed(seed: u64) -> FaultFs {
        let state = State {
            rng: Rng(seed),
            ..State::default()
        };
        FaultFs {
            state: Arc::new(Mutex::new(state)),
            process: None,
        }
    }

    /// A handle for one process: every call through it (and every writer
    /// opened through it, as through any handle) fails once a crash has
    /// happened, as if the process died with the machine. The engine may
    /// then run its flush and merge threads over it
    /// ([`FileSystem::background_threads`]): a crash stops all of them at
    /// once, whatever they were doing.
    pub fn process(&self) -> FaultFs {
        FaultFs {
            state: self.state.clone(),
            process: Some(self.lock().boot),
        }
    }

    /// Locks the state for a call of the file-system interface: fails if
    /// this is a process handle from before the last crash.
    fn live(&self) -> io::Result<MutexGuard<'_, State>> {
        let st = self.lock();
        match self.process {
            Some(boot) if boot != st.boot => Err(io::Error::other(
                "the process that took this file-system handle died in a crash",
            )),
            _ => Ok(st),
        }
    }

    /// Fails the `n`-th (from 0) operation from now to which `kind` applies,
    /// once. Shorthand for `inject(Fault::new(kind).after(n))`.
    pub fn fail_after(&self, n: u64, kind: FaultKind) {
        self.inject(Fault::new(kind).after(n));
    }

    /// Arms `fault`, in addition to any already armed. When several fire on
    /// one operation, the first armed wins.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// How many operations injected faults have failed so far.
    pub fn faults_fired(&self) -> u64 {
        self.lock().fired
    }

    /// How many operations (every [`Op`], failed ones included) have been
    /// attempted since this file system was made. Crashes do not reset it.
    pub fn op_count(&self) -> u64 {
        self.lock().ops
    }

    /// Every write or truncation of a file while a mapping of it was alive,
    /// in order. The engine must never cause one.
    pub fn violations(&self) -> Vec<Violation> {
        self.lock().violations.clone()
    }

    /// Simulates a crash and restart: afterwards the state is what the next
    /// process would find (see [`CrashMode`]). After a power loss everything
    /// left is durable; after a process kill, data the dead process never
    /// synced stays unsynced (the operating system still holds it), so a later
    /// power loss can still drop it.
    ///
    /// Writers opened before the crash fail with [`io::ErrorKind::Other`];
    /// mappings taken before it keep their bytes and are no longer tracked for
    /// violations. Armed faults are disarmed. Counters are kept.
    pub fn crash(&self, mode: CrashMode) {
        self.lock().crash(mode);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }
}

/// Locks the state. A panic while it was held (a failed assertion in a test
/// thread) leaves it consistent enough to inspect, so poisoning is ignored.
fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.lock();
        f.debug_struct("FaultFs")
            .field("dirs", &st.dirs.len())
            .field("files", &st.files.len())
            .field("ops", &st.ops)
            .field("boot", &st.boot)
            .finish_non_exhaustive()
    }
}

impl FileSystem for FaultFs {
    fn background_threads(&self) -> bool {
        self.process.is_some()
    }

    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        st.check(Op::CreateDir)?;
        let dir = normalize(dir);
        if st.files.contains_key(&dir) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{}: a file exists", dir.display()),
            ));
        }
        if let Some(file) = dir.ancestors().find(|a| st.files.contains_key(*a)) {
            return Err(not_a_directory(file));
        }
        for ancestor in dir.ancestors().take_while(|a| !is_root(a)) {
            st.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut st = self.live()?;
        st.check(Op::Create)?;
        let path = normalize(path);
        st.require_dir(&parent(&path))?;
        if st.dirs.contains(&path) || st.files.contains_key(&path) {
            return Err(already_exists(&path));
        }
        let id = st.new_inode();
        st.files.insert(path.clone(), id);
        Ok(Box::new(st.open(&self.state, id, path)))
    }

    fn open_append(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut st = self.live()?;
        st.check(Op::OpenAppend)?;
        let path = normalize(path);
        let id = st.lookup(&path)?;
        Ok(Box::new(st.open(&self.state, id, path)))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        let mut st = self.live()?;
        st.check(Op::Read)?;
        let id = st.lookup(&normalize(path))?;
        Ok(st.inode(id).data.clone())
    }

    fn map(&self, path: &Path) -> io::Result<Mapped> {
        let mut st = self.live()?;
        st.check(Op::Map)?;
        let id = st.lookup(&normalize(path))?;
        let mapped = Mapped::from_vec(st.inode(id).data.clone());
        st.maps.retain(|(_, liveness)| liveness.is_alive());
        st.maps.push((id, mapped.liveness()));
        Ok(mapped)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        st.check(Op::Rename)?;
        let (from, to) = (normalize(from), normalize(to));
        let id = st.lookup(&from)?;
        st.require_dir(&parent(&to))?;
        if st.dirs.contains(&to) {
            return Err(is_a_directory(&to));
        }
        // Two names of one file: POSIX says rename does nothing.
        if st.files.get(&to) == Some(&id) {
            return Ok(());
        }
        st.files.remove(&from);
        if let Some(replaced) = st.files.insert(to, id) {
            st.release(replaced);
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        st.check(Op::Remove)?;
        let path = normalize(path);
        let id = st.lookup(&path)?;
        st.files.remove(&path);
        st.release(id);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.live()?;
        st.check(Op::SyncDir)?;
        let dir = normalize(dir);
        st.require_dir(&dir)?;
        let st = &mut *st;
        let mut dropped = Vec::new();
        st.durable_files.retain(|path, id| {
            let keep = parent(path) != dir;
            if !keep {
                dropped.push(*id);
            }
            keep
        });
        for (path, id) in &st.files {
            if parent(path) == dir {
                st.durable_files.insert(path.clone(), *id);
            }
        }
        st.durable_dirs.retain(|path| parent(path) != dir);
        for path in &st.dirs {
            if parent(path) == dir {
                st.durable_dirs.insert(path.clone());
            }
        }
        for id in dropped {
            st.release(id);
        }
        Ok(())
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut st = self.live()?;
        st.check(Op::List)?;
        let dir = normalize(dir);
        st.require_dir(&dir)?;
        let children = st.dirs.iter().chain(st.files.keys());
        let mut names: Vec<PathBuf> = children
            .filter(|path| parent(path) == dir)
            .filter_map(|path| path.file_name().map(PathBuf::from))
            .collect();
        names.sort();
        Ok(names)
    }

    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut st = self.live()?;
        st.check(Op::Truncate)?;
        let path = normalize(path);
        let id = st.lookup(&path)?;
        let len = usize::try_from(len).map_err(|_| enospc())?;
        st.note_if_mapped(id, &path, ViolationKind::TruncatedWhileMapped);
        st.inode(id).set_len(len);
        Ok(())
    }

    fn len(&self, path: &Path) -> io::Result<u64> {
        let mut st = self.live()?;
        st.check(Op::Len)?;
        let id = st.lookup(&normalize(path))?;
        Ok(st.inode(id).data.len() as u64)
    }
}

type InodeId = u64;

#[derive(Default)]
struct State {
    /// Incremented by every crash; writers opened in an earlier boot are dead.
    boot: u64,
    /// Visible directories (the root is implicit).
    dirs: BTreeSet<PathBuf>,
    /// Visible files.
    files: BTreeMap<PathBuf, InodeId>,
    durable_dirs: BTreeSet<PathBuf>,
    durable_files: BTreeMap<PathBuf, InodeId>,
    /// Ordered, so that crashes draw random numbers in a fixed order.
    inodes: BTreeMap<InodeId, Inode>,
    next_inode: InodeId,
    faults: Vec<Fault>,
    ops: u64,
    fired: u64,
    rng: Rng,
    maps: Vec<(InodeId, MapLiveness)>,
    violations: Vec<Violation>,
}

impl State {
    /// Counts one operation and fails it if an armed fault fires.
    fn check(&mut self, op: Op) -> io::Result<()> {
        match self.fire(op) {
            Some(kind) => Err(kind.error()),
            None => Ok(()),
        }
    }

    /// Counts one operation; returns the kind of the fault that fires on it.
    fn fire(&mut self, op: Op) -> Option<FaultKind> {
        self.ops += 1;
        let mut fired = None;
        let mut spent = None;
        for (i, fault) in self.faults.iter_mut().enumerate() {
            if !fault.matches(op) {
                continue;
            }
            if fault.skip > 0 {
                fault.skip -= 1;
            } else if fired.is_none() {
                fired = Some(fault.kind);
                if !fault.sticky {
                    spent = Some(i);
                }
            }
        }
        if let Some(i) = spent {
            self.faults.remove(i);
        }
        if fired.is_some() {
            self.fired += 1;
        }
        fired
    }

    fn new_inode(&mut self) -> InodeId {
        let id = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(id, Inode::default());
        id
    }

    /// The inode `id`, which the caller found in a namespace or holds open.
    fn inode(&mut self, id: InodeId) -> &mut Inode {
        self.inodes.entry(id).or_default()
    }

    fn open(&mut self, state: &Arc<Mutex<State>>, id: InodeId, path: PathBuf) -> FaultFile {
        let boot = self.boot;
        let inode = self.inode(id);
        inode.handles += 1;
        FaultFile {
            state: Arc::clone(state),
            boot,
            inode: id,
            path,
            pos: inode.data.len(),
        }
    }

    /// Forgets inode `id` once no name, durable name or open writer refers to it.
    fn release(&mut self, id: InodeId) {
        let referenced = self.files.values().any(|&f| f == id)
            || self.durable_files.values().any(|&f| f == id)
            || self.inodes.get(&id).is_some_and(|inode| inode.handles > 0);
        if !referenced {
            self.inodes.remove(&id);
        }
    }

    fn lookup(&self, path: &Path) -> io::Result<InodeId> {
        match self.files.get(path) {
            Some(&id) => Ok(id),
            None if self.dirs.contains(path) => Err(is_a_directory(path)),
            None => Err(not_found(path)),
        }
    }

    fn require_dir(&self, dir: &Path) -> io::Result<()> {
        if is_root(dir) || self.dirs.contains(dir) {
            Ok(())
        } else if self.files.contains_key(dir) {
            Err(not_a_directory(dir))
        } else {
            Err(not_found(dir))
        }
    }

    fn note_if_mapped(&mut self, id: InodeId, path: &Path, kind: ViolationKind) {
        let mapped = self
            .maps
            .iter()
            .any(|(mapped, liveness)| *mapped == id && liveness.is_alive());
        if mapped {
            self.violations.push(Violation {
                path: path.to_path_buf(),
                kind,
            });
        }
    }

    fn crash(&mut self, mode: CrashMode) {
        self.boot += 1;
        self.maps.clear();
        self.faults.clear();
        let unsynced = match mode {
            CrashMode::ProcessKill => {
                for inode in self.inodes.values_mut() {
                    inode.handles = 0;
                }
                let ids: Vec<InodeId> = self.inodes.keys().copied().collect();
                for id in ids {
                    self.release(id);
                }
                return;
            }
            CrashMode::PowerLoss(unsynced) => unsynced,
        };

        // A directory survives if its own entry and all its ancestors' did.
        let mut dirs = BTreeSet::new();
        let mut by_depth: Vec<&PathBuf> = self.durable_dirs.iter().collect();
        by_depth.sort_by_key(|dir| dir.components().count());
        for dir in by_depth {
            let up = parent(dir);
            if is_root(&up) || dirs.contains(&up) {
                dirs.insert(dir.clone());
            }
        }
        let files: BTreeMap<PathBuf, InodeId> = self
            .durable_files
            .iter()
            .filter(|(path, _)| {
                let up = parent(path);
                is_root(&up) || dirs.contains(&up)
            })
            .map(|(path, &id)| (path.clone(), id))
            .collect();
        let live: BTreeSet<InodeId> = files.values().copied().collect();
        let mut inodes = BTreeMap::new();
        for id in live {
            if let Some(inode) = self.inodes.get(&id) {
                let contents = inode.after_power_loss(unsynced, &mut self.rng);
                inodes.insert(id, Inode::durable(contents));
            }
        }
        self.dirs = dirs.clone();
        self.durable_dirs = dirs;
        self.files = files.clone();
        self.durable_files = files;
        self.inodes = inodes;
    }
}

/// One file's bytes, however many names it has.
#[derive(Default)]
struct Inode {
    /// What reads return.
    data: Vec<u8>,
    /// What the disk holds.
    durable: Vec<u8>,
    /// `data[..clean]` equals `durable[..clean]`: the bytes a sync need not copy.
    clean: usize,
    /// Ranges (all at or past `clean`) whose write-back failed: no later sync
    /// writes them, and the disk holds zeros there.
    lost: Vec<Range<usize>>,
    /// Open writers.
    handles: usize,
}

impl Inode {
    fn durable(contents: Vec<u8>) -> Inode {
        Inode {
            clean: contents.len(),
            durable: contents.clone(),
            data: contents,
            lost: Vec::new(),
            handles: 0,
        }
    }

    fn write_at(&mut self, pos: usize, buf: &[u8]) {
        let end = pos + buf.len();
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        self.data[pos..end].copy_from_slice(buf);
        self.clean = self.clean.min(pos);
        self.unlose(pos..end);
    }

    fn set_len(&mut self, len: usize) {
        if len < self.data.len() {
            self.clean = self.clean.min(len);
            self.unlose(len..usize::MAX);
        }
        self.data.resize(len, 0);
    }

    /// Bytes in `range` are dirty again (rewritten) or gone (truncated).
    fn unlose(&mut self, range: Range<usize>) {
        let mut kept = Vec::with_capacity(self.lost.len());
        for lost in self.lost.drain(..) {
            if lost.start < range.start {
                kept.push(lost.start..lost.end.min(range.start));
            }
            if lost.end > range.end {
                kept.push(lost.start.max(range.end)..lost.end);
            }
        }
        self.lost = kept;
    }

    fn sync_succeeded(&mut self) {
        self.durable.truncate(self.clean);
        self.durable.extend_from_slice(&self.data[self.clean..]);
        zero(&mut self.durable, &self.lost);
        self.lost.clear();
        self.clean = self.data.len();
    }

    fn sync_failed(&mut self) {
        if self.clean < self.data.len() {
            self.lost.push(self.clean..self.data.len());
        }
    }

    fn after_power_loss(&self, unsynced: Unsynced, rng: &mut Rng) -> Vec<u8> {
        let mut contents = match unsynced {
            Unsynced::Lost => return self.durable.clone(),
            Unsynced::Kept => self.data.clone(),
            Unsynced::Torn | Unsynced::Scattered => {
                let rewritten = self.clean < self.durable.len();
                if rewritten && rng.below(2) == 0 {
                    return self.durable.clone();
                }
                let kept = rng.below(self.data.len() - self.clean + 1);
                let mut contents = self.data[..self.clean + kept].to_vec();
                if unsynced == Unsynced::Scattered {
                    const PAGE: usize = 4096;
                    let mut page = self.clean / PAGE * PAGE;
                    while page < contents.len() {
                        let end = (page + PAGE).min(contents.len());
                        if rng.below(2) == 0 {
                            contents[page.max(self.clean)..end].fill(0);
                        }
                        page = end;
                    }
                }
                contents
            }
        };
        zero(&mut contents, &self.lost);
        contents
    }
}

fn zero(bytes: &mut [u8], ranges: &[Range<usize>]) {
    for range in ranges {
        let end = range.end.min(bytes.len());
        if range.start < end {
            bytes[range.start..end].fill(0);
        }
    }
}

/// A writer on a [`FaultFs`] file.
struct FaultFile {
    state: Arc<Mutex<State>>,
    boot: u64,
    inode: InodeId,
    path: PathBuf,
    /// The file's length after this writer's last operation.
    pos: usize,
}

/// Locks the state for a writer opened in boot `boot`; fails if a crash has
/// happened since.
fn live_state<'a>(
    state: &'a Mutex<State>,
    boot: u64,
    path: &Path,
) -> io::Result<MutexGuard<'a, State>> {
    let st = lock(state);
    if st.boot == boot {
        Ok(st)
    } else {
        Err(io::Error::other(format!(
            "{}: writer opened before a simulated crash",
            path.display()
        )))
    }
}

impl WritableFile for FaultFile {
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut st = live_state(&self.state, self.boot, &self.path)?;
        let fault = st.fire(Op::Write);
        let written = match fault {
            None => buf.len(),
            Some(FaultKind::ShortWrite) => st.rng.below(buf.len()),
            Some(kind) => return Err(kind.error()),
        };
        if written > 0 {
            st.note_if_mapped(self.inode, &self.path, ViolationKind::WrittenWhileMapped);
        }
        let inode = st.inode(self.inode);
        self.pos = inode.data.len();
        inode.write_at(self.pos, &buf[..written]);
        self.pos += written;
        match fault {
            Some(kind) => Err(kind.error()),
            None => Ok(()),
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut st = live_state(&self.state, self.boot, &self.path)?;
        let fault = st.fire(Op::Sync);
        let inode = st.inode(self.inode);
        match fault {
            Some(kind) => {
                inode.sync_failed();
                Err(kind.error())
            }
            None => {
                inode.sync_succeeded();
                Ok(())
            }
        }
    }

    fn len(&self) -> u64 {
        self.pos as u64
    }
}

impl Drop for FaultFile {
    fn drop(&mut self) {
        if let Ok(mut st) = live_state(&self.state, self.boot, &self.path) {
            let inode = st.inode(self.inode);
            inode.handles = inode.handles.saturating_sub(1);
            st.release(self.inode);
        }
    }
}

impl fmt::Debug for FaultFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultFile")
            .field("path", &self.path)
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

/// splitmix64: small, seedable, good enough to pick tear points.
#[derive(Debug, Default)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`; 0 when `n` is 0.
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// `path` without `.` components or a trailing slash, so that equal paths
/// compare equal.
fn normalize(path: &Path) -> PathBuf {
    path.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

fn is_root(path: &Path) -> bool {
    path.as_os_str().is_empty() || path.parent().is_none()
}

fn parent(path: &Path) -> PathBuf {
    path.parent().map(Path::to_path_buf).unwrap_or_default()
}

#[cfg(unix)]
fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

#[cfg(not(unix))]
fn eio() -> io::Error {
    io::Error::other("injected I/O error")
}

#[cfg(unix)]
fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

#[cfg(not(unix))]
fn enospc() -> io::Error {
    io::Error::new(
        io::ErrorKind::StorageFull,
        "injected: no space left on device",
    )
}

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{}: no such file or directory", path.display()),
    )
}

fn already_exists(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{}: the file exists", path.display()),
    )
}

fn is_a_directory(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::IsADirectory,
        format!("{}: is a directory", path.display()),
    )
}

fn not_a_directory(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotADirectory,
        format!("{}: not a directory", path.display()),
    )
}
