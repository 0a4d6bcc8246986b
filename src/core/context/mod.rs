//! The context index: every text file under a workspace's `context/` (a checkout linked there
//! too) cut into passages and ranked by BM25, with rung's own notes (the repository's `context/`,
//! embedded) beside them. The index lives in `.rung/context-index.json` and is brought up to date
//! on each search: a file is read again only when its length or modification time changed, a
//! file that went is dropped. Passages hold their line range and term counts, not their text,
//! which is read from the file when a passage is returned, so a large checkout costs an index a
//! fraction of its size.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use include_dir::{Dir, include_dir};
use serde::{Deserialize, Serialize};

/// rung's own notes for the agent: PTX and SASS reading, Triton, CuTe layouts, Hopper habits.
static NOTES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../context");

/// Files over this are not indexed (generated sources, data).
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;
/// A passage ends at a blank line once it has this many lines, and at this many at the most.
const MIN_LINES: usize = 4;
const MAX_LINES: usize = 14;
/// BM25's usual constants.
const K1: f64 = 1.2;
const B: f64 = 0.75;
/// Bump when the passages or terms change, so an old index is rebuilt.
const INDEX_VERSION: u32 = 1;
/// The most files one index reads: a checkout has thousands, a mistaken link to a disk millions.
pub const MAX_FILES: usize = 50_000;

/// The workspace's `context/` as the agent may read it: its real path, unless that is `/`, the
/// home folder or a folder above it, or a folder above the workspace (a link `context -> /` or
/// `context -> ~` would hand the agent every file and index the disk). `None`: no context.
pub fn context_root(root: &Path) -> Option<PathBuf> {
    let real = root.join("context").canonicalize().ok()?;
    let home = dirs::home_dir().and_then(|h| h.canonicalize().ok());
    let too_wide = real.parent().is_none()
        || home.as_ref().is_some_and(|h| h.starts_with(&real))
        || root.canonicalize().is_ok_and(|r| r.starts_with(&real));
    (!too_wide).then_some(real)
}
pub const INDEX_FILE: &str = "context-index.json";

/// A passage found by a search.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    /// Relative to the workspace (`context/...`), or `rung:NAME` for rung's own notes.
    pub path: PathBuf,
    /// The passage's first line, from 1.
    pub line: usize,
    pub text: String,
    pub score: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Index {
    version: u32,
    files: BTreeMap<String, FileEntry>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FileEntry {
    len: u64,
    mtime_ns: u128,
    chunks: Vec<Chunk>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Chunk {
    /// Lines `[start, end)`, from 0.
    start: usize,
    end: usize,
    /// Term → count, and the passage's length in terms.
    terms: BTreeMap<String, u32>,
    len: u32,
}

/// Words: lower case, letters, digits and `_`, two characters or more; an identifier with `_`
/// also gives its parts (`cp_async_bulk` → `cp`, `async`, `bulk`).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for w in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        let w = w.to_lowercase();
        if w.chars().count() >= 2 {
            if w.contains('_') {
                out.extend(w.split('_').filter(|p| p.chars().count() >= 2).map(str::to_string));
            }
            out.push(w);
        }
    }
    out
}

/// Passages of a text: paragraphs (cut at blank lines once long enough), at most `MAX_LINES`.
fn chunks(text: &str) -> Vec<Chunk> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut start = 0;
    let close = |start: usize, end: usize, out: &mut Vec<Chunk>| {
        let mut terms_map: BTreeMap<String, u32> = BTreeMap::new();
        let mut len = 0;
        for l in &lines[start..end] {
            for t in terms(l) {
                *terms_map.entry(t).or_default() += 1;
                len += 1;
            }
        }
        if len > 0 {
            out.push(Chunk { start, end, terms: terms_map, len });
        }
    };
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1 - start;
        if (line.trim().is_empty() && n >= MIN_LINES) || n >= MAX_LINES {
            close(start, i + 1, &mut out);
            start = i + 1;
        }
    }
    if start < lines.len() {
        close(start, lines.len(), &mut out);
    }
    out
}

fn stamp(path: &Path) -> Option<(u64, u128)> {
    let m = std::fs::metadata(path).ok()?;
    let mtime = m.modified().ok()?.duration_since(UNIX_EPOCH).ok()?.as_nanos();
    Some((m.len(), mtime))
}

/// What an update did, for tests and the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Updated {
    pub read: usize,
    pub kept: usize,
    pub dropped: usize,
}

/// Brings the workspace's index up to date with its `context/` and saves it when anything changed.
fn update(root: &Path, state_dir: &Path) -> (Index, Updated) {
    let path = state_dir.join(INDEX_FILE);
    let mut index: Index = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|i: &Index| i.version == INDEX_VERSION)
        .unwrap_or_default();
    index.version = INDEX_VERSION;
    let mut stats = Updated::default();
    let mut seen = std::collections::BTreeSet::new();
    if let Some(real) = context_root(root) {
        let dir = root.join("context");
        let mut files = 0;
        for entry in ignore::WalkBuilder::new(&dir).follow_links(true).hidden(true).build().flatten() {
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let file = entry.path();
            // A link inside context/ that leaves it is not context.
            if !file.canonicalize().is_ok_and(|f| f.starts_with(&real)) {
                continue;
            }
            files += 1;
            if files > MAX_FILES {
                break;
            }
            let Some((len, mtime_ns)) = stamp(file) else { continue };
            if len > MAX_FILE_BYTES {
                continue;
            }
            let key = file.strip_prefix(root).unwrap_or(file).to_string_lossy().into_owned();
            seen.insert(key.clone());
            if index.files.get(&key).is_some_and(|f| f.len == len && f.mtime_ns == mtime_ns) {
                stats.kept += 1;
                continue;
            }
            // Not text: left out, and remembered as empty so it is not read again.
            let chunks = std::fs::read_to_string(file).map(|t| chunks(&t)).unwrap_or_default();
            index.files.insert(key, FileEntry { len, mtime_ns, chunks });
            stats.read += 1;
        }
    }
    let before = index.files.len();
    index.files.retain(|k, _| seen.contains(k));
    stats.dropped = before - index.files.len();
    if stats.read > 0 || stats.dropped > 0 {
        let _ = std::fs::create_dir_all(state_dir);
        if let Ok(bytes) = serde_json::to_vec(&index) {
            // Written beside and renamed, so a concurrent search never reads half an index.
            let tmp = path.with_extension(format!("tmp{}", crate::store::unique()));
            if std::fs::write(&tmp, bytes).is_ok() {
                let _ = std::fs::rename(&tmp, &path);
            }
        }
    }
    (index, stats)
}

/// Updates the index and returns what that did (the search does the same first).
pub fn refresh(root: &Path, state_dir: &Path) -> Updated {
    update(root, state_dir).1
}

/// The best passages for `query` from the workspace's `context/` and rung's notes, best first,
/// at most `limit` and at most about `budget_tokens` of text (four characters a token); the
/// first passage is always returned whole.
pub fn search(root: &Path, state_dir: &Path, query: &str, limit: usize, budget_tokens: usize) -> Vec<Passage> {
    let mut q = terms(query);
    q.sort();
    q.dedup();
    if q.is_empty() {
        return vec![];
    }
    let (index, _) = update(root, state_dir);
    // rung's notes, chunked in memory: a few small files.
    let notes: Vec<(String, String, Vec<Chunk>)> = NOTES
        .files()
        .filter_map(|f| {
            let text = f.contents_utf8()?.to_string();
            let name = format!("rung:{}", f.path().display());
            let c = chunks(&text);
            Some((name, text, c))
        })
        .collect();
    let all: Vec<(&str, &Chunk)> = index
        .files
        .iter()
        .flat_map(|(k, f)| f.chunks.iter().map(move |c| (k.as_str(), c)))
        .chain(notes.iter().flat_map(|(k, _, cs)| cs.iter().map(move |c| (k.as_str(), c))))
        .collect();
    let n = all.len() as f64;
    if all.is_empty() {
        return vec![];
    }
    let avg = all.iter().map(|(_, c)| f64::from(c.len)).sum::<f64>() / n;
    let idf: Vec<f64> = q
        .iter()
        .map(|t| {
            let df = all.iter().filter(|(_, c)| c.terms.contains_key(t)).count() as f64;
            (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
        })
        .collect();
    let mut scored: Vec<(f64, &str, &Chunk)> = all
        .iter()
        .filter_map(|(k, c)| {
            let score: f64 = q
                .iter()
                .zip(&idf)
                .filter_map(|(t, idf)| {
                    let tf = f64::from(*c.terms.get(t)?);
                    Some(idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * f64::from(c.len) / avg)))
                })
                .sum();
            (score > 0.0).then_some((score, *k, *c))
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)).then(a.2.start.cmp(&b.2.start)));
    let mut out = Vec::new();
    let mut spent = 0;
    for (score, key, c) in scored.into_iter().take(limit) {
        let text = match notes.iter().find(|(k, _, _)| k == key) {
            Some((_, t, _)) => t.lines().skip(c.start).take(c.end - c.start).collect::<Vec<_>>().join("\n"),
            None => match std::fs::read_to_string(root.join(key)) {
                Ok(t) => t.lines().skip(c.start).take(c.end - c.start).collect::<Vec<_>>().join("\n"),
                Err(_) => continue,
            },
        };
        let cost = text.chars().count().div_ceil(4);
        if !out.is_empty() && spent + cost > budget_tokens {
            break;
        }
        spent += cost;
        out.push(Passage { path: PathBuf::from(key), line: c.start + 1, text: text.trim_end().to_string(), score });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_split_identifiers_and_drop_short_words() {
        assert_eq!(terms("cp_async_bulk a LDG.E.128"), ["cp", "async", "bulk", "cp_async_bulk", "ldg", "128"]);
    }

    #[test]
    fn passages_end_at_paragraphs_or_at_their_longest() {
        let text = "ab cd\nef gh\nij kl\nmn op\n\nnext one\n".to_string() + &"xy zw\n".repeat(30);
        let c = chunks(&text);
        assert_eq!((c[0].start, c[0].end), (0, 5));
        assert!(c.iter().all(|c| c.end - c.start <= MAX_LINES));
        assert_eq!(c.last().unwrap().end, text.lines().count());
    }
}
