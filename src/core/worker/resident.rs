//! The bench's files in the native worker. Its kept input files are held in memory between
//! requests ([`bytes`]), and outputs are written back through a mapping of the file
//! ([`write_through`]).
//!
//! The kept input files: every
//! version of a problem at one seed and size is timed on the same input sets, and reading them
//! from disk again took most of a series' set-up.
//!
//! A file is held with its length, inode and change time, and read again when any of them moved
//! (rung draws a changed set again, which writes it). rung checks each kept file's CRC-32 before
//! a bench, so a change that left the times alone is caught there and redrawn.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Stamp {
    len: u64,
    ino: u64,
    ctime_ns: i128,
}

fn stamp(path: &Path) -> std::io::Result<Stamp> {
    let m = std::fs::metadata(path)?;
    Ok(Stamp { len: m.len(), ino: m.ino(), ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128 })
}

/// Held files, the most recently used last, and the bytes they may take in all.
pub struct Resident {
    files: Vec<(PathBuf, Stamp, Arc<Vec<u8>>)>,
    cap: u64,
}

impl Resident {
    pub const fn new(cap: u64) -> Resident {
        Resident { files: Vec::new(), cap }
    }

    /// `path`'s bytes: held ones while its stamp holds, else read (and held when they fit).
    pub fn bytes(&mut self, path: &Path) -> std::io::Result<Arc<Vec<u8>>> {
        let now = stamp(path)?;
        if let Some(i) = self.files.iter().position(|(p, _, _)| p == path) {
            let (p, s, b) = self.files.remove(i);
            if s == now {
                self.files.push((p, s, b.clone()));
                return Ok(b);
            }
        }
        let (now, bytes) = read(path, now, cores().min(8))?;
        self.hold(path, now, bytes.clone());
        Ok(bytes)
    }

    /// Holds every file in `paths` that is not held as it is now, read on a thread each: the
    /// kept input sets of one size are gigabytes, and read one after another they took a second
    /// of the first bench's upload. A file that cannot be read is left to [`Resident::bytes`],
    /// which says why.
    pub fn hold_all(&mut self, paths: &[PathBuf]) {
        // Only as many bytes as may be held: more would be read in vain, all in memory at once.
        let mut room = self.cap;
        let mut stale: Vec<(&PathBuf, Stamp)> = Vec::new();
        for p in paths {
            let Ok(now) = stamp(p) else { continue };
            let held = self.files.iter().any(|(h, s, _)| h == p && *s == now);
            if !held && now.len <= room {
                room -= now.len;
                stale.push((p, now));
            }
        }
        // The cores shared among the files: each large one is read in parts at once.
        let parts = (cores() / stale.len().max(1)).clamp(1, 8);
        let read: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = stale.iter().map(|&(p, now)| scope.spawn(move || read(p, now, parts))).collect();
            handles.into_iter().map(|h| h.join().ok().and_then(Result::ok)).collect()
        });
        for ((p, _), got) in stale.into_iter().zip(read) {
            if let Some((now, bytes)) = got {
                self.files.retain(|(h, _, _)| h != p);
                self.hold(p, now, bytes);
            }
        }
    }

    /// Holds `bytes`, read from `path` at stamp `now` (`None`: it changed while read), when they
    /// fit, letting the oldest go.
    fn hold(&mut self, path: &Path, now: Option<Stamp>, bytes: Arc<Vec<u8>>) {
        let Some(now) = now.filter(|_| bytes.len() as u64 <= self.cap) else { return };
        let mut held: u64 = self.files.iter().map(|f| f.2.len() as u64).sum();
        while held + bytes.len() as u64 > self.cap && !self.files.is_empty() {
            held -= self.files.remove(0).2.len() as u64;
        }
        self.files.push((path.to_path_buf(), now, bytes));
    }
}

/// `path`'s bytes, and its stamp `now` if it still holds after the read (a file read while it
/// changed is not held: the next request reads it again). A file of 64 MiB or more is read in up
/// to `parts` parts on as many threads: the copy out of the page cache into new memory faults
/// its pages in one at a time, and 2.5 GB of the demo's kept sets on four threads took most of
/// the first bench's upload (0.99 s on an H100 host).
fn read(path: &Path, now: Stamp, parts: usize) -> std::io::Result<(Option<Stamp>, Arc<Vec<u8>>)> {
    use std::os::unix::fs::FileExt;
    const PART_MIN: usize = 64 << 20;
    let f = std::fs::File::open(path)?;
    let len = f.metadata()?.len() as usize;
    let parts = parts.min(len / PART_MIN).max(1);
    // Zeroed by the allocator's fresh mapping, not by a pass over it.
    let mut bytes = vec![0u8; len];
    let chunk = len.div_ceil(parts).max(1);
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = bytes
            .chunks_mut(chunk)
            .enumerate()
            .map(|(i, part)| scope.spawn(move || f.read_exact_at(part, (i * chunk) as u64)))
            .collect();
        handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err(std::io::Error::other("a read panicked"))))
    })?;
    // A file that grew or changed while it was read is not the one stamped: the stamp says so.
    Ok(((stamp(path)? == now).then_some(now), Arc::new(bytes)))
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The worker's held files: at most a quarter of the memory available when it first held one,
/// and 16 GiB.
static HELD: Mutex<Option<Resident>> = Mutex::new(None);

fn with_held<T>(f: impl FnOnce(&mut Resident) -> T) -> T {
    let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
    f(held.get_or_insert_with(|| Resident::new((crate::gpu::available_memory() / 4).min(16 << 30))))
}

/// [`Resident::bytes`] on the worker's held files.
pub fn bytes(path: &Path) -> std::io::Result<Arc<Vec<u8>>> {
    with_held(|r| r.bytes(path))
}

/// [`Resident::hold_all`] on the worker's held files.
pub fn hold_all(paths: &[PathBuf]) {
    with_held(|r| r.hold_all(paths))
}

/// Writes `len` bytes to `path`, which `fill` copies into the slice it is given: the file itself,
/// mapped (no buffer of the output's size to allocate and copy again), or memory then written
/// out where the file cannot be mapped.
pub fn write_through<E>(
    path: &Path,
    len: usize,
    fill: impl FnOnce(&mut [u8]) -> Result<(), E>,
    io: impl Fn(std::io::Error) -> E,
) -> Result<(), E> {
    let mapped = (len > 0)
        .then(|| {
            // A new file: a link planted at `path` is replaced, not written through.
            let f = crate::kept::fresh(path).ok()?;
            f.set_len(len as u64).ok()?;
            // SAFETY: a file this process just created at its full length; nothing else writes it
            // while it is mapped (the version's work has finished, rung reads it after the answer).
            unsafe { memmap2::MmapMut::map_mut(&f) }.ok()
        })
        .flatten();
    match mapped {
        // Shared and unmapped when dropped: rung reads the pages as written (no msync: that
        // would wait for a disk-backed data folder's write-back, which nothing needs).
        Some(mut m) => {
            prefault(&mut m[..]);
            fill(&mut m[..])
        }
        None => {
            let mut bytes = vec![0u8; len];
            fill(&mut bytes)?;
            crate::kept::write_fresh(path, &bytes).map_err(io)
        }
    }
}

/// Touches every page of `bytes` (a new file's mapping, all zeros) from several threads, so the
/// kernel allocates and zeroes its pages in parallel rather than one at a time inside the copy
/// that fills it: for a bench's 512 MiB output, most of its write-back (0.36-0.40 s on one
/// thread on the 2-core machine, 0.20 s on two). Small mappings are left to the copy.
fn prefault(bytes: &mut [u8]) {
    const PAGE: usize = 4096;
    let threads = cores().min(8);
    if bytes.len() < (64 << 20) || threads < 2 {
        return;
    }
    let chunk = bytes.len().div_ceil(threads).next_multiple_of(PAGE);
    std::thread::scope(|scope| {
        for part in bytes.chunks_mut(chunk) {
            scope.spawn(move || {
                for i in (0..part.len()).step_by(PAGE) {
                    // SAFETY: `i` is inside `part`; a volatile store of the zero already there,
                    // so the touch is not optimised away.
                    unsafe { std::ptr::write_volatile(part.as_mut_ptr().add(i), 0) };
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held all at once: each file read once, an unchanged held one not read again, a changed
    /// one read again, a missing one left for `bytes` to name.
    #[test]
    fn files_held_all_at_once_are_the_files_as_they_are() {
        let tmp = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = (0..3).map(|k| tmp.path().join(format!("s{k}.bin"))).collect();
        for (k, p) in paths.iter().enumerate() {
            std::fs::write(p, vec![k as u8; 300]).unwrap();
        }
        let mut r = Resident::new(10_000);
        let kept = r.bytes(&paths[0]).unwrap();
        let missing = tmp.path().join("gone.bin");
        let mut all = paths.clone();
        all.push(missing.clone());
        std::thread::sleep(std::time::Duration::from_millis(5));
        std::fs::write(&paths[2], vec![9u8; 300]).unwrap();
        r.hold_all(&all);
        assert_eq!(r.files.len(), 3, "every readable file held once");
        assert!(Arc::ptr_eq(&kept, &r.bytes(&paths[0]).unwrap()), "a held, unchanged file is not read again");
        let held: Vec<Arc<Vec<u8>>> = paths.iter().map(|p| r.bytes(p).unwrap()).collect();
        assert_eq!((held[1][0], held[2][0]), (1, 9), "the files as they are now");
        assert!(Arc::ptr_eq(&held[1], &r.bytes(&paths[1]).unwrap()), "held by hold_all");
        assert!(r.bytes(&missing).is_err());
        // No more is read than may be held.
        let mut small = Resident::new(700);
        small.hold_all(&paths);
        assert_eq!(small.files.len(), 2, "two of the three 300-byte files fit in 700");
    }

    #[test]
    fn a_held_file_is_read_once_until_it_is_written_and_the_oldest_goes_past_the_cap() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a.bin"), tmp.path().join("b.bin"));
        std::fs::write(&a, vec![1u8; 600]).unwrap();
        std::fs::write(&b, vec![2u8; 600]).unwrap();
        let mut r = Resident::new(1000);
        let first = r.bytes(&a).unwrap();
        assert!(Arc::ptr_eq(&first, &r.bytes(&a).unwrap()), "held, not read again");
        // Rewritten with the same length: read again.
        std::thread::sleep(std::time::Duration::from_millis(5));
        std::fs::write(&a, vec![3u8; 600]).unwrap();
        let again = r.bytes(&a).unwrap();
        assert!(!Arc::ptr_eq(&first, &again));
        assert_eq!(again[0], 3);
        // b does not fit beside a: a goes.
        let bb = r.bytes(&b).unwrap();
        assert!(Arc::ptr_eq(&bb, &r.bytes(&b).unwrap()));
        assert!(!Arc::ptr_eq(&again, &r.bytes(&a).unwrap()), "a was let go for b");
        // Larger than the cap: read every time, never held.
        let big = tmp.path().join("big.bin");
        std::fs::write(&big, vec![4u8; 2000]).unwrap();
        assert!(!Arc::ptr_eq(&r.bytes(&big).unwrap(), &r.bytes(&big).unwrap()));
        // A file that went away is an error, not stale bytes.
        std::fs::remove_file(&b).unwrap();
        assert!(r.bytes(&b).is_err());
    }

    #[test]
    fn an_output_is_written_through_its_mapping_over_a_longer_file_and_empty_ones_too() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("y.bin");
        std::fs::write(&out, vec![9u8; 100]).unwrap();
        let io = |e: std::io::Error| e.to_string();
        let ten = |b: &mut [u8]| {
            b.copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
            Ok::<(), String>(())
        };
        write_through(&out, 10, ten, io).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        let nothing = |b: &mut [u8]| {
            assert!(b.is_empty());
            Ok::<(), String>(())
        };
        write_through(&out, 0, nothing, io).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), Vec::<u8>::new());
        // The copy's failure is the caller's error, and nothing half-written is claimed.
        let err = write_through(&out, 4, |_| Err::<(), String>("copy failed".into()), io).unwrap_err();
        assert_eq!(err, "copy failed");
        // A folder that is not there: the error names it.
        let missing = tmp.path().join("gone/y.bin");
        assert!(write_through(&missing, 4, |_| Ok::<(), String>(()), io).is_err());
        // A link planted where the output goes is replaced; what it pointed at is left alone.
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"the user's").unwrap();
        std::fs::remove_file(&out).unwrap();
        std::os::unix::fs::symlink(&victim, &out).unwrap();
        write_through(&out, 10, ten, io).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"the user's");
        assert!(std::fs::symlink_metadata(&out).unwrap().file_type().is_file());
    }

    /// A large output written back through the mapping, its pages touched from several threads
    /// first: the file holds exactly what the fill wrote, to its last byte, and replaces a
    /// link planted at its path.
    #[test]
    fn a_large_write_back_holds_exactly_what_was_filled() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("y.bin");
        let victim = tmp.path().join("victim.bin");
        std::fs::write(&victim, b"the user's").unwrap();
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let len = (96 << 20) + 12_345;
        let fill = |b: &mut [u8]| -> Result<(), std::io::Error> {
            for (i, x) in b.iter_mut().enumerate() {
                *x = (i % 251) as u8 ^ 0x5a;
            }
            Ok(())
        };
        write_through(&path, len, fill, |e| e).unwrap();
        let got = std::fs::read(&path).unwrap();
        assert_eq!(got.len(), len);
        assert!(got.iter().enumerate().all(|(i, x)| *x == (i % 251) as u8 ^ 0x5a), "a byte differs");
        assert_eq!(std::fs::read(&victim).unwrap(), b"the user's");
    }

    /// A file held in parts read at once is the file, byte for byte, to its last (uneven) part.
    #[test]
    fn a_large_file_held_in_parts_is_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x-0.bin");
        let len = (200 << 20) + 4_321;
        let bytes: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let now = stamp(&path).unwrap();
        for parts in [1, 3, 8] {
            let (still, got) = read(&path, now, parts).unwrap();
            assert_eq!(still, Some(now));
            assert!(got.len() == len && got[..] == bytes[..], "{parts} parts: the bytes differ");
        }
        let mut r = Resident::new(1 << 30);
        r.hold_all(std::slice::from_ref(&path));
        assert!(r.bytes(&path).unwrap()[..] == bytes[..]);
    }
}
