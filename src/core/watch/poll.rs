//! The watcher's safety net, and its record of what each path held when it last started jobs.
//!
//! File events can be lost (inotify dropped one save in a hundred, once, in rung's own watch
//! test) and some file systems never send them (network mounts, some container volumes). A scan
//! of the workspace's files every [`POLL`] catches what the events missed; with `--poll`, or
//! when file events cannot be had at all, it is the only source. Whichever source reports a path
//! first starts its jobs; the other finds the file as it was last seen and starts nothing.

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the safety net scans. A change it finds is reported once a second scan sees the
/// same, so a file caught mid-write waits for its writer.
pub const POLL: Duration = Duration::from_millis(200);

/// The most entries one scan visits (a workspace holding a dataset is not walked whole).
const MAX_ENTRIES: usize = 20_000;

/// Files larger than this are told apart by length and modification time alone.
const HASH_LIMIT: u64 = 16 << 20;

/// Which paths matter: an absolute path to its workspace-relative one, or None to skip it (and,
/// for a folder, everything under it).
pub type Keep = Arc<dyn Fn(&Path) -> Option<PathBuf> + Send + Sync>;

/// What a scan keeps of a file: its length and modification time (ns since the epoch).
pub type Stat = (u64, i128);

/// What a file held: its length, modification time and (up to [`HASH_LIMIT`]) its bytes' hash.
/// Two saves in the same clock tick with the same length still differ by their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    stat: Stat,
    hash: u64,
}

fn stat_of(meta: &std::fs::Metadata) -> Stat {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i128);
    (meta.len(), mtime)
}

/// The file's fingerprint; None when it is gone or not a regular file.
pub fn fingerprint(path: &Path) -> Option<Fingerprint> {
    let meta = std::fs::metadata(path).ok().filter(|m| m.is_file())?;
    let stat = stat_of(&meta);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    if stat.0 <= HASH_LIMIT {
        h.write(&std::fs::read(path).ok()?);
    }
    Some(Fingerprint { stat, hash: h.finish() })
}

/// The workspace's files that `keep` accepts (it maps an absolute path to the workspace-relative
/// one, or None to skip it and, for a folder, everything under it), with their [`Stat`].
pub fn scan(root: &Path, keep: &dyn Fn(&Path) -> Option<PathBuf>) -> BTreeMap<PathBuf, Stat> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    let mut seen = 0;
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return out;
            }
            let path = e.path();
            let Some(rel) = keep(&path) else { continue };
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                dirs.push(path);
            } else if meta.is_file() {
                out.insert(rel, stat_of(&meta));
            }
        }
    }
    out
}

/// The paths that are new, changed or gone between two scans.
pub fn differ(old: &BTreeMap<PathBuf, Stat>, new: &BTreeMap<PathBuf, Stat>) -> Vec<PathBuf> {
    let changed = new.iter().filter(|(p, s)| old.get(*p) != Some(*s)).map(|(p, _)| p.clone());
    let gone = old.keys().filter(|p| !new.contains_key(*p)).cloned();
    changed.chain(gone).collect()
}

/// Scans every [`POLL`] until `stop` is set or `send` fails, sending the paths that changed
/// once two scans in a row agree on them.
pub fn spawn(root: PathBuf, keep: Keep, stop: Arc<AtomicBool>, send: impl Fn(Vec<PathBuf>) -> bool + Send + 'static) {
    std::thread::spawn(move || {
        let mut known = scan(&root, &*keep);
        let mut pending: Option<BTreeMap<PathBuf, Stat>> = None;
        while !stop.load(Ordering::SeqCst) {
            std::thread::sleep(POLL);
            let now = scan(&root, &*keep);
            let changed = differ(&known, &now);
            if changed.is_empty() {
                pending = None;
                continue;
            }
            if pending.as_ref() == Some(&now) {
                if !send(changed) {
                    break;
                }
                known = now;
                pending = None;
            } else {
                pending = Some(now);
            }
        }
    });
}

/// Each path's fingerprint when the pipeline last took it in.
#[derive(Debug, Default)]
pub struct Seen(BTreeMap<PathBuf, Option<Fingerprint>>);

impl Seen {
    /// Of `paths` (relative to `root`), those that differ from when they were last taken in,
    /// each recorded as it is now. A folder, or a path not taken in before, always counts: the
    /// record starts empty, so the watch reads no file until one is reported.
    pub fn fresh(&mut self, root: &Path, paths: Vec<PathBuf>) -> Vec<PathBuf> {
        paths
            .into_iter()
            .filter(|p| {
                let full = root.join(p);
                if full.is_dir() {
                    return true;
                }
                let now = fingerprint(&full);
                self.0.insert(p.clone(), now) != Some(now)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep_all(root: &Path) -> impl Fn(&Path) -> Option<PathBuf> + '_ {
        move |p: &Path| {
            let rel = p.strip_prefix(root).ok()?.to_path_buf();
            (!rel.starts_with(".state")).then_some(rel)
        }
    }

    #[test]
    fn a_path_is_fresh_once_per_change_whichever_source_reports_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("v001.cu"), "a").unwrap();
        let mut seen = Seen::default();
        let p = || vec![PathBuf::from("v001.cu")];
        // The first report counts; reported again with nothing changed: no jobs.
        assert_eq!(seen.fresh(root, p()), p());
        assert!(seen.fresh(root, p()).is_empty());
        std::fs::write(root.join("v001.cu"), "b").unwrap();
        // The event and then the poll (or the other way round): one of them starts the jobs.
        assert_eq!(seen.fresh(root, p()), p());
        assert!(seen.fresh(root, p()).is_empty());
        // The same length, whatever the clock's tick: the bytes tell them apart.
        std::fs::write(root.join("v001.cu"), "c").unwrap();
        assert_eq!(seen.fresh(root, p()), p());
        // Gone, once; a new file, once.
        std::fs::remove_file(root.join("v001.cu")).unwrap();
        assert_eq!(seen.fresh(root, p()), p());
        assert!(seen.fresh(root, p()).is_empty());
        std::fs::write(root.join("v002.cu"), "x").unwrap();
        assert_eq!(seen.fresh(root, vec![PathBuf::from("v002.cu")]), [PathBuf::from("v002.cu")]);
    }

    #[test]
    fn a_scan_sees_new_changed_and_gone_files_and_skips_what_keep_refuses() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("versions")).unwrap();
        std::fs::create_dir_all(root.join(".state")).unwrap();
        std::fs::write(root.join("versions").join("v001.cu"), "a").unwrap();
        std::fs::write(root.join("versions").join("v002.cu"), "a").unwrap();
        std::fs::write(root.join(".state").join("db"), "a").unwrap();
        let keep = keep_all(root);
        let before = scan(root, &keep);
        assert_eq!(
            before.keys().cloned().collect::<Vec<_>>(),
            [Path::new("versions/v001.cu"), Path::new("versions/v002.cu")]
        );
        std::fs::write(root.join("versions").join("v001.cu"), "longer").unwrap();
        std::fs::remove_file(root.join("versions").join("v002.cu")).unwrap();
        std::fs::write(root.join("versions").join("v003.cu"), "a").unwrap();
        std::fs::write(root.join(".state").join("db"), "changed").unwrap();
        let mut d = differ(&before, &scan(root, &keep));
        d.sort();
        assert_eq!(d, [Path::new("versions/v001.cu"), Path::new("versions/v002.cu"), Path::new("versions/v003.cu")]);
    }
}
