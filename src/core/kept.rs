//! Bulk files a check draws once and reuses while its runners live: a benchmark size's input
//! sets and the reference's outputs there, which every version of a problem at one seed and size
//! shares (drawing them and running a CPU reference took most of each version's bench).
//!
//! Each file is remembered with its length, inode, change time and CRC-32 as written. The data
//! folder is reachable from the processes that run versions, so nothing is trusted because it
//! was kept: a file that changed since (a version or a reference that wrote into its inputs) no
//! longer matches and is drawn again. For the same reason rung writes every file it puts in the
//! data folder with [`write_fresh`], which replaces a link left there instead of following it.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Folders kept at most (one per problem, seed and size); the oldest goes first.
pub const KEPT_FOLDERS: usize = 4;

/// A file as it was read: its length, inode, change time and CRC-32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    len: u64,
    ino: u64,
    ctime_ns: i128,
    crc: u32,
}

/// What is kept, by file, and the folders they live in (oldest first).
#[derive(Default)]
pub struct Kept {
    files: BTreeMap<PathBuf, Stamp>,
    folders: Vec<PathBuf>,
    /// Files being written on threads of their own, not kept until they are joined.
    ahead: Vec<Ahead>,
}

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kept").field("files", &self.files.len()).field("folders", &self.folders).finish()
    }
}

/// Files a thread writes ahead of need: stamped by that thread as soon as they are written, so
/// a change made between their writing and their joining (by a version that ran meanwhile) shows.
struct Ahead {
    folder: PathBuf,
    paths: Vec<PathBuf>,
    handle: std::thread::JoinHandle<std::io::Result<Vec<Stamp>>>,
    /// Stops the writer early (kills what it started) when nothing will want its files.
    abandon: Option<Box<dyn FnOnce() + Send>>,
}

impl Kept {
    /// Whether every path in `paths` is kept (intact or not: [`Kept::intact`] reads them).
    pub fn knows(&self, paths: &[PathBuf]) -> bool {
        !paths.is_empty() && paths.iter().all(|p| self.files.contains_key(p))
    }

    /// Whether any files are being written ahead.
    pub fn writing_ahead(&self) -> bool {
        !self.ahead.is_empty()
    }

    /// Whether any writing ahead is still at work (not merely waiting to be joined).
    pub fn ahead_busy(&self) -> bool {
        self.ahead.iter().any(|a| !a.handle.is_finished())
    }

    /// `write` on a thread of its own, writing `paths` (inside `folder`) that the check will
    /// want; they are kept when [`Kept::join_ahead`] finds it ended well. `abandon`, if given,
    /// stops it early when the check ends without asking for them. The returned channel gets
    /// each file with its stamp as soon as they are written whole (for other work that waits on
    /// them, [`unchanged`] after it); it closes without a word if they are not.
    pub fn write_ahead(
        &mut self,
        folder: PathBuf,
        paths: Vec<PathBuf>,
        abandon: Option<Box<dyn FnOnce() + Send>>,
        write: impl FnOnce() -> std::io::Result<()> + Send + 'static,
    ) -> std::sync::mpsc::Receiver<Stamped> {
        if let Some(i) = self.ahead.iter().position(|a| a.paths == paths) {
            let _ = self.ahead.remove(i).handle.join();
        }
        let (tx, written) = std::sync::mpsc::channel();
        let stamped = paths.clone();
        let handle = std::thread::spawn(move || {
            write()?;
            let now: Vec<Stamp> = stamps(&stamped).into_iter().collect::<std::io::Result<_>>()?;
            let _ = tx.send(stamped.into_iter().zip(now.iter().copied()).collect());
            Ok(now)
        });
        self.ahead.push(Ahead { folder, paths, handle, abandon });
        written
    }

    /// Waits for the files written ahead at `paths`, and keeps them as their writer found them
    /// when it wrote them: whether they were written whole and are unchanged since. (Nothing
    /// reads them while they are written.)
    pub fn join_ahead(&mut self, paths: &[PathBuf]) -> bool {
        let Some(i) = self.ahead.iter().position(|a| a.paths == paths) else { return false };
        let a = self.ahead.remove(i);
        let Ok(Ok(stamps)) = a.handle.join() else { return false };
        for (p, s) in a.paths.iter().zip(stamps) {
            self.files.insert(p.clone(), s);
        }
        self.note_folder(&a.folder);
        self.intact(paths)
    }

    /// Waits for any files being written ahead, which are not kept.
    pub fn wait_ahead(&mut self) {
        for a in self.ahead.drain(..) {
            let _ = a.handle.join();
        }
    }

    /// Stops the writers that can be stopped and waits for every one; nothing is kept.
    pub fn abandon_ahead(&mut self) {
        for a in &mut self.ahead {
            if let Some(stop) = a.abandon.take() {
                stop();
            }
        }
        self.wait_ahead();
    }

    /// Whether every path in `paths` was kept and is unchanged since; those that are not are
    /// forgotten. An empty list is never intact.
    pub fn intact(&mut self, paths: &[PathBuf]) -> bool {
        let mut all = !paths.is_empty();
        for (p, now) in paths.iter().zip(stamps(paths)) {
            let same = self.files.get(p).is_some_and(|kept| now.is_ok_and(|now| now == *kept));
            if !same {
                self.files.remove(p);
                all = false;
            }
        }
        all
    }

    /// Keeps `paths` (just written, inside `folder`) as they are now. Past [`KEPT_FOLDERS`]
    /// folders, the oldest is removed from disk and forgotten.
    pub fn keep(&mut self, folder: &Path, paths: &[PathBuf]) -> std::io::Result<()> {
        for (p, now) in paths.iter().zip(stamps(paths)) {
            self.files.insert(p.clone(), now?);
        }
        self.note_folder(folder);
        Ok(())
    }

    /// `folder` as the newest kept; past [`KEPT_FOLDERS`] folders, the oldest is removed from
    /// disk and forgotten.
    fn note_folder(&mut self, folder: &Path) {
        if let Some(i) = self.folders.iter().position(|f| f == folder) {
            let f = self.folders.remove(i);
            self.folders.push(f);
        } else {
            self.folders.push(folder.to_path_buf());
        }
        while self.folders.len() > KEPT_FOLDERS {
            let old = self.folders.remove(0);
            self.files.retain(|p, _| !p.starts_with(&old));
            let _ = std::fs::remove_dir_all(&old);
        }
    }
}

/// Writes `bytes` to a new file at `path`, removing whatever was there first: a link a version's
/// process left in the data folder is replaced, not followed (rung would otherwise write its
/// draw into the file the link names).
pub fn write_fresh(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    fresh(path)?.write_all(bytes)
}

/// [`write_fresh`] of `from`'s bytes, streamed.
pub fn copy_fresh(from: &Path, to: &Path) -> std::io::Result<()> {
    std::io::copy(&mut std::fs::File::open(from)?, &mut fresh(to)?).map(|_| ())
}

/// A new file at `path`, open to read and write (a mapping needs both), whatever stood there
/// removed first.
pub fn fresh(path: &Path) -> std::io::Result<std::fs::File> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    // create_new: O_EXCL, which fails on a link planted since rather than following it.
    std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(path)
}

/// Files with their stamps as they were written ([`Kept::write_ahead`]).
pub type Stamped = Vec<(PathBuf, Stamp)>;

/// Whether every file is as it was stamped: the same bytes, and untouched since (a byte changed
/// and put back moves its change time).
pub fn unchanged(as_then: &[(PathBuf, Stamp)]) -> bool {
    let paths: Vec<PathBuf> = as_then.iter().map(|(p, _)| p.clone()).collect();
    stamps(&paths).iter().zip(as_then).all(|(now, (_, then))| now.as_ref().ok() == Some(then))
}

/// Each path's stamp, each file's CRC on a thread of its own: the input sets of one size are
/// read at once.
fn stamps(paths: &[PathBuf]) -> Vec<std::io::Result<Stamp>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = paths.iter().map(|p| scope.spawn(move || stamp(p))).collect();
        let lost = || Err(std::io::Error::other("reading the file panicked"));
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| lost())).collect()
    })
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    // A link or anything but a plain file is not what rung wrote (and /dev/zero never ends).
    if !std::fs::symlink_metadata(path)?.file_type().is_file() {
        return Err(std::io::Error::other("not a plain file"));
    }
    let f = std::fs::File::open(path)?;
    let m = f.metadata()?;
    let mut f = f.take(m.len());
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 8 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    // The metadata again: a write while the file was read shows as a changed length or time.
    let after = std::fs::metadata(path)?;
    if after.len() != m.len() || after.ctime() != m.ctime() || after.ctime_nsec() != m.ctime_nsec() {
        return Err(std::io::Error::other("changed while it was read"));
    }
    Ok(Stamp {
        len: m.len(),
        ino: m.ino(),
        ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
        crc: hasher.finalize(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Files written ahead are kept only once their writer ended well, and only for the paths
    /// they were written at.
    #[test]
    fn files_written_ahead_are_kept_when_their_writer_ends_well() {
        let tmp = tempfile::tempdir().unwrap();
        let (dir, other) = (tmp.path().join("k"), tmp.path().join("other"));
        let paths = vec![dir.join("a.bin"), dir.join("b.bin")];
        let mut kept = Kept::default();
        let (d, p) = (dir.clone(), paths.clone());
        let written = kept.write_ahead(dir.clone(), paths.clone(), None, move || {
            std::fs::create_dir_all(&d)?;
            p.iter().try_for_each(|p| write_fresh(p, &[1u8; 4096]))
        });
        assert!(kept.writing_ahead());
        let told = written.recv().expect("told once they are written");
        assert_eq!(told.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(), paths);
        assert!(unchanged(&told));
        assert!(!kept.join_ahead(&paths[..1]), "another set of files is not these");
        assert!(kept.join_ahead(&paths));
        assert!(!kept.writing_ahead() && kept.knows(&paths) && kept.intact(&paths));

        let broken = vec![other.join("a.bin")];
        let written = kept.write_ahead(other.clone(), broken.clone(), None, || Err(std::io::Error::other("disk full")));
        assert!(written.recv().is_err(), "a writer that failed tells nothing");
        assert!(!kept.join_ahead(&broken), "a writer that failed keeps nothing");
        assert!(!kept.knows(&broken) && !kept.writing_ahead());
    }

    /// A file written ahead and changed before it is joined (by a version that ran meanwhile,
    /// in the folder it can reach) is not kept as it stands: its writer stamped it as it wrote it.
    #[test]
    fn a_file_written_ahead_and_changed_before_the_join_is_not_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("k");
        let a = dir.join("a.bin");
        let mut kept = Kept::default();
        let (d, p) = (dir.clone(), a.clone());
        kept.write_ahead(dir.clone(), vec![a.clone()], None, move || {
            std::fs::create_dir_all(&d)?;
            write_fresh(&p, &[3u8; 1 << 16])
        });
        // The writer has ended (its stamps taken) before anything else touches the file.
        while !kept.ahead[0].handle.is_finished() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new().write(true).open(&a).unwrap().write_at(&[9], 100).unwrap();
        assert!(!kept.join_ahead(std::slice::from_ref(&a)), "changed after it was written, before the join");
        assert!(!kept.intact(std::slice::from_ref(&a)));
    }

    /// Abandoning stops the writers that can be stopped, waits for all, and keeps nothing.
    #[test]
    fn abandoned_writers_are_stopped_and_keep_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("a.bin");
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut kept = Kept::default();
        let (flag, p) = (stop.clone(), a.clone());
        let t0 = std::time::Instant::now();
        kept.write_ahead(
            tmp.path().to_path_buf(),
            vec![a.clone()],
            Some(Box::new(move || flag.store(true, std::sync::atomic::Ordering::SeqCst))),
            move || {
                // A writer that would take a minute unless stopped.
                while !stop.load(std::sync::atomic::Ordering::SeqCst) && t0.elapsed().as_secs() < 60 {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                write_fresh(&p, &[1])
            },
        );
        kept.abandon_ahead();
        assert!(t0.elapsed().as_secs() < 10, "the writer was not stopped");
        assert!(!kept.writing_ahead() && !kept.knows(std::slice::from_ref(&a)));
    }

    /// The reference run ahead on the fresh set counts only if the set is as drawn when it ends:
    /// untouched, not changed and put back, not replaced by a link, not gone.
    #[test]
    fn a_file_changed_and_put_back_is_not_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let a = tmp.path().join("x-3.bin");
        let stamped = |p: &PathBuf| vec![(p.clone(), stamp(p).unwrap())];
        write_fresh(&a, &[5u8; 1 << 16]).unwrap();
        let then = stamped(&a);
        assert!(unchanged(&then));
        std::thread::sleep(std::time::Duration::from_millis(20));
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&a).unwrap();
        f.write_at(&[6], 10).unwrap();
        f.write_at(&[5], 10).unwrap();
        assert!(!unchanged(&then), "changed and put back");
        let same = tmp.path().join("same.bin");
        std::fs::write(&same, [5u8; 1 << 16]).unwrap();
        write_fresh(&a, &[5u8; 1 << 16]).unwrap();
        let then = stamped(&a);
        std::fs::remove_file(&a).unwrap();
        std::os::unix::fs::symlink(&same, &a).unwrap();
        assert!(!unchanged(&then), "a link to the same bytes");
        std::fs::remove_file(&a).unwrap();
        assert!(!unchanged(&then), "gone");
    }

    #[test]
    fn a_kept_file_is_intact_until_anything_writes_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("k");
        std::fs::create_dir(&dir).unwrap();
        let a = dir.join("a.bin");
        std::fs::write(&a, vec![7u8; 1 << 20]).unwrap();
        let mut kept = Kept::default();
        assert!(!kept.intact(std::slice::from_ref(&a)), "not kept yet");
        kept.keep(&dir, std::slice::from_ref(&a)).unwrap();
        assert!(kept.intact(std::slice::from_ref(&a)));
        assert!(!kept.intact(&[]), "nothing is not intact");
        // One byte changed in place, length and name the same.
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new().write(true).open(&a).unwrap().write_at(&[8], 4096).unwrap();
        assert!(!kept.intact(std::slice::from_ref(&a)));
        // Forgotten once found changed, even if the byte is put back.
        std::fs::OpenOptions::new().write(true).open(&a).unwrap().write_at(&[7], 4096).unwrap();
        assert!(!kept.intact(std::slice::from_ref(&a)));
        // A missing file is not intact.
        kept.keep(&dir, std::slice::from_ref(&a)).unwrap();
        std::fs::remove_file(&a).unwrap();
        assert!(!kept.intact(std::slice::from_ref(&a)));
        // Nor a link in its place, even to a file with the same bytes.
        let same = dir.join("same.bin");
        std::fs::write(&same, vec![7u8; 1 << 20]).unwrap();
        std::fs::write(&a, vec![7u8; 1 << 20]).unwrap();
        kept.keep(&dir, std::slice::from_ref(&a)).unwrap();
        std::fs::remove_file(&a).unwrap();
        std::os::unix::fs::symlink(&same, &a).unwrap();
        assert!(!kept.intact(std::slice::from_ref(&a)));
    }

    #[test]
    fn a_fresh_write_replaces_a_planted_link_instead_of_writing_through_it() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim.txt");
        std::fs::write(&victim, "the user's file").unwrap();
        let kept = tmp.path().join("x-0.bin");
        std::os::unix::fs::symlink(&victim, &kept).unwrap();
        write_fresh(&kept, &[1, 2, 3]).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "the user's file");
        assert!(std::fs::symlink_metadata(&kept).unwrap().file_type().is_file());
        assert_eq!(std::fs::read(&kept).unwrap(), [1, 2, 3]);
        // Over a plain file, and a copy, the same way.
        write_fresh(&kept, &[4]).unwrap();
        let to = tmp.path().join("copy.bin");
        std::os::unix::fs::symlink(&victim, &to).unwrap();
        copy_fresh(&kept, &to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), [4]);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "the user's file");
        // A link to a device that never ends is not read at all.
        let zero = tmp.path().join("zero.bin");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(stamp(&zero).is_err());
    }

    #[test]
    fn past_the_limit_the_oldest_folder_is_removed_and_forgotten() {
        let tmp = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        let mut kept = Kept::default();
        for i in 0..=KEPT_FOLDERS {
            let dir = tmp.path().join(format!("k{i}"));
            std::fs::create_dir(&dir).unwrap();
            let f = dir.join("x.bin");
            std::fs::write(&f, [i as u8; 16]).unwrap();
            kept.keep(&dir, std::slice::from_ref(&f)).unwrap();
            files.push(f);
        }
        assert!(!tmp.path().join("k0").exists(), "the oldest folder is gone");
        assert!(!kept.intact(&files[..1]));
        assert!(kept.intact(&files[1..]), "the newer ones stay");
    }
}
