//! The context index: every text file under a workspace's `context/` (checkouts cloned there,
//! folders linked there) cut into passages and ranked by BM25, with rung's own notes (the
//! repository's `context/`, embedded) beside them.
//!
//! The index is SQLite's FTS5 in `.rung/context.sqlite`: a table of files with their length and
//! modification time, a table of passages (file, line range, the section heading they are under)
//! and a contentless FTS5 table of their terms, so the index holds no copy of the text: a
//! passage's text is read from its file when it is returned. Each search first brings the index
//! up to date: the tree is walked and stat'ed, a file is read again only when its length or
//! modification time changed, a file that went is dropped. Terms are rung's own ([`terms`]):
//! identifiers whole and by their `_` parts, PTX names whole and by their `.` parts.
//!
//! Where a context source is added, updated and listed: [`sources`]; the PTX manual's splitter:
//! [`ptxdoc`].

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use include_dir::{Dir, include_dir};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

mod champions;
pub mod ptxdoc;
pub mod sources;

/// rung's own notes for the agent: PTX and SASS reading, Triton, CuTe layouts, Hopper habits.
static NOTES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../context");

/// Files over this are not indexed (generated sources, data).
pub const MAX_FILE_BYTES: u64 = 2 * 1024 * 1024;
/// A passage ends at a blank line once it has this many lines, and at this many at the most.
const MIN_LINES: usize = 4;
const MAX_LINES: usize = 14;
/// Bump when the passages or terms change, so an old index is rebuilt.
const INDEX_VERSION: i64 = 4;
/// The most files one index reads: a checkout has thousands, a mistaken link to a disk millions.
pub const MAX_FILES: usize = 50_000;
/// The index, in the workspace's `.rung/`.
pub const INDEX_FILE: &str = "context.sqlite";
/// The JSON index of earlier versions, removed when the SQLite one is made.
const OLD_INDEX_FILE: &str = "context-index.json";
/// BM25's weight for a passage's heading column (its file's name and the section it is under)
/// against its text: a query naming an instruction finds the manual's section on it first.
const HEADING_WEIGHT: f64 = 4.0;
/// The most times one term of a passage is indexed.
const TF_CAP: usize = 3;
/// How many passages a query's terms may be in (summed) for every such passage to be scored;
/// past it, passages holding all the terms are scored first ([`Index::query`]).
const POSTINGS_BUDGET: i64 = 20_000;

/// What went wrong with the index: its file, and SQLite's word.
#[derive(Debug, thiserror::Error)]
#[error("the context index {}: {source}", path.display())]
pub struct IndexError {
    pub path: PathBuf,
    #[source]
    pub source: rusqlite::Error,
}

/// Whether `real` (a canonical folder) is too wide to be context: `/`, the home folder or a
/// folder above it, or a folder holding the workspace. Such a link would hand the agent every
/// file and index the disk.
fn too_wide(real: &Path, root: &Path) -> bool {
    let home = dirs::home_dir().and_then(|h| h.canonicalize().ok());
    real.parent().is_none()
        || home.as_ref().is_some_and(|h| h.starts_with(real))
        || root.canonicalize().is_ok_and(|r| r.starts_with(real))
}

/// The workspace's `context/` as the agent may read it: its real path, unless that is too wide
/// (a link `context -> /` or `context -> ~`). `None`: no context.
pub fn context_root(root: &Path) -> Option<PathBuf> {
    let real = root.join("context").canonicalize().ok()?;
    (!too_wide(&real, root)).then_some(real)
}

/// Every folder the context's files may really be in: `context/` itself, then the folders that
/// rung.toml's `[[context.sources]]` link in (`rung context add <folder>`). A link inside
/// `context/` to anywhere else is not context. Empty: no context.
pub fn context_roots(root: &Path) -> Vec<PathBuf> {
    let Some(real) = context_root(root) else { return vec![] };
    let mut out = vec![real];
    for s in sources::recorded(root).unwrap_or_default() {
        for target in s.link_targets() {
            if let Ok(t) = target.canonicalize()
                && !too_wide(&t, root)
            {
                out.push(t);
            }
        }
    }
    out
}

/// A passage found by a search.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    /// Relative to the workspace (`context/...`), or `rung:NAME` for rung's own notes.
    pub path: PathBuf,
    /// The passage's first line, from 1.
    pub line: usize,
    /// The heading of the section it is in (Markdown files: the nearest `#` line above it).
    pub section: Option<String>,
    pub text: String,
    pub score: f64,
}

impl Passage {
    /// Where it is: `context/docs/ptx/…md:12`, with ` § heading` when it is under one.
    pub fn place(&self) -> String {
        match &self.section {
            Some(s) => format!("{}:{} § {s}", self.path.display(), self.line),
            None => format!("{}:{}", self.path.display(), self.line),
        }
    }
}

/// Words: lower case, letters, digits and `_`, two characters or more. An identifier with `_`
/// also gives its parts (`cp_async_bulk` → `cp`, `async`, `bulk`); a dotted name gives itself
/// whole and its parts (`cp.async.bulk` → `cp.async.bulk`, `cp`, `async`, `bulk`).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let word = |w: &str, out: &mut Vec<String>| {
        if w.chars().count() >= 2 {
            if w.contains('_') {
                out.extend(w.split('_').filter(|p| p.chars().count() >= 2).map(str::to_string));
            }
            out.push(w.to_string());
        }
    };
    for w in text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')) {
        let w = w.trim_matches('.').to_lowercase();
        if w.contains('.') {
            if w.chars().count() >= 2 && !w.contains("..") {
                out.push(w.clone());
            }
            for part in w.split('.') {
                word(part, &mut out);
            }
        } else {
            word(&w, &mut out);
        }
    }
    out
}

/// A passage before it is stored: its lines `[start, end)` from 0, the section it is under and
/// its terms, the heading's and the text's, each joined by spaces (FTS5 reads them back).
#[derive(Debug, Clone, PartialEq)]
struct Chunk {
    start: usize,
    end: usize,
    heading: Option<String>,
    head_terms: String,
    body_terms: String,
}

/// A passage's heading terms (its file's name's and its section's) and text terms, each joined
/// by spaces. Each term at most TF_CAP times: BM25's term frequency saturates well before, and
/// the index stores a position for every term it is given.
fn passage_terms(lines: &[&str], name_terms: &str, heading: Option<&str>) -> (String, String) {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let body = lines
        .iter()
        .flat_map(|l| terms(l))
        .filter(|t| {
            let n = seen.entry(t.clone()).or_default();
            *n += 1;
            *n <= TF_CAP
        })
        .collect::<Vec<_>>()
        .join(" ");
    let head = match heading {
        Some(h) => format!("{name_terms} {}", terms(h).join(" ")),
        None => name_terms.to_string(),
    };
    (head, body)
}

/// The terms of a file's name, as its passages' headings hold them.
fn name_terms(name: &str) -> String {
    terms(name.rsplit('/').next().unwrap_or(name)).join(" ")
}

/// Passages of a text: paragraphs (cut at blank lines once long enough), at most `MAX_LINES`,
/// each starting again at a Markdown heading. `name` is the file's name: its words count as the
/// heading's, and in a Markdown file each passage is under the `#` line above it.
fn chunks(text: &str, name: &str) -> Vec<Chunk> {
    let markdown = [".md", ".markdown"].iter().any(|e| name.to_ascii_lowercase().ends_with(e));
    let lines: Vec<&str> = text.lines().collect();
    let name_terms = name_terms(name);
    let heading_of = |l: &str| {
        let h = l.trim_start_matches('#');
        (markdown && l.starts_with('#') && h.starts_with(' ')).then(|| h.trim().to_string())
    };
    let mut out = Vec::new();
    let mut heading: Option<String> = None;
    let mut close = |start: usize, end: usize, heading: &Option<String>| {
        let (head_terms, body) = passage_terms(&lines[start..end], &name_terms, heading.as_deref());
        if !body.is_empty() {
            out.push(Chunk { start, end, heading: heading.clone(), head_terms, body_terms: body });
        }
    };
    let mut start = 0;
    for (i, line) in lines.iter().enumerate() {
        if let Some(h) = heading_of(line) {
            if i > start {
                close(start, i, &heading);
            }
            start = i;
            heading = Some(h);
        }
        let n = i + 1 - start;
        if (line.trim().is_empty() && n >= MIN_LINES) || n >= MAX_LINES {
            close(start, i + 1, &heading);
            start = i + 1;
        }
    }
    if start < lines.len() {
        close(start, lines.len(), &heading);
    }
    out
}

/// What an update did, for tests and the log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Updated {
    pub read: usize,
    pub kept: usize,
    pub dropped: usize,
}

/// A file as the walk found it: its key (`context/...` or `rung:NAME`), where to read it, its
/// length and a stamp that changes when it does (the modification time, or a note's hash).
struct Found {
    key: String,
    path: Option<PathBuf>,
    len: u64,
    stamp: i64,
}

/// The files of `context/` that are context (links that leave it only to a linked source,
/// hidden files and `.gitignore`d ones left out, large ones skipped), then rung's notes.
fn walk(root: &Path) -> Vec<Found> {
    let roots = context_roots(root);
    let found = std::sync::Mutex::new(Vec::new());
    if !roots.is_empty() {
        let allowed = roots.clone();
        let count = std::sync::atomic::AtomicUsize::new(0);
        // Walked on every core: stat'ing a checkout's files is most of an update's time.
        ignore::WalkBuilder::new(root.join("context"))
            .follow_links(true)
            .hidden(true)
            .threads(std::thread::available_parallelism().map_or(2, |n| n.get().min(8)))
            .filter_entry(move |e| {
                e.depth() == 0
                    || !e.path_is_symlink()
                    || e.path().canonicalize().is_ok_and(|r| allowed.iter().any(|a| r.starts_with(a)))
            })
            .build_parallel()
            .run(|| {
                Box::new(|entry| {
                    use ignore::WalkState;
                    let Ok(entry) = entry else { return WalkState::Continue };
                    if !entry.file_type().is_some_and(|t| t.is_file()) {
                        return WalkState::Continue;
                    }
                    if count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= MAX_FILES {
                        return WalkState::Quit;
                    }
                    let Ok(meta) = entry.metadata() else { return WalkState::Continue };
                    if meta.len() > MAX_FILE_BYTES {
                        return WalkState::Continue;
                    }
                    let stamp = meta
                        .modified()
                        .ok()
                        .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_nanos() as i64);
                    let file = entry.path();
                    let key = file.strip_prefix(root).unwrap_or(file).to_string_lossy().into_owned();
                    let f = Found { key, path: Some(file.to_path_buf()), len: meta.len(), stamp };
                    found.lock().unwrap_or_else(|e| e.into_inner()).push(f);
                    WalkState::Continue
                })
            });
    }
    let mut out = found.into_inner().unwrap_or_else(|e| e.into_inner());
    out.sort_by(|a, b| a.key.cmp(&b.key));
    for f in NOTES.files() {
        let bytes = f.contents();
        // FNV-1a of the note: a new rung with changed notes reads them again.
        let hash =
            bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
        out.push(Found {
            key: format!("rung:{}", f.path().display()),
            path: None,
            len: bytes.len() as u64,
            stamp: hash as i64,
        });
    }
    out
}

/// The text of a file the walk found, or of one of rung's notes.
fn read(root: &Path, key: &str) -> Option<String> {
    match key.strip_prefix("rung:") {
        Some(name) => NOTES.get_file(name).and_then(|f| f.contents_utf8()).map(str::to_string),
        None => std::fs::read_to_string(root.join(key)).ok(),
    }
}

/// A passage's file key, its lines `[start, end)` and its section.
type Place = (String, usize, usize, Option<String>);

/// The open index of a workspace.
pub struct Index {
    conn: Connection,
    path: PathBuf,
    /// Which terms get champion lists, and their length.
    lists: champions::Lists,
}

impl Index {
    /// Opens (or makes) the index in `state_dir`; one of another version is made again.
    pub fn open(state_dir: &Path) -> Result<Index, IndexError> {
        let path = state_dir.join(INDEX_FILE);
        let err = |source| IndexError { path: path.clone(), source };
        let _ = std::fs::create_dir_all(state_dir);
        let _ = std::fs::remove_file(state_dir.join(OLD_INDEX_FILE));
        let conn = Connection::open(&path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(err)?;
        let version: Option<i64> =
            conn.query_row("SELECT value FROM meta WHERE key = 'version'", [], |r| r.get(0)).optional().unwrap_or(None);
        if version != Some(INDEX_VERSION) {
            conn.execute_batch(&format!(
                "BEGIN IMMEDIATE;
                 DROP TABLE IF EXISTS meta; DROP TABLE IF EXISTS files;
                 DROP TABLE IF EXISTS chunks; DROP TABLE IF EXISTS vocab; DROP TABLE IF EXISTS terms;
                 DROP TABLE IF EXISTS champions;
                 CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER);
                 CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL,
                                    len INTEGER NOT NULL, stamp INTEGER NOT NULL);
                 CREATE TABLE chunks(id INTEGER PRIMARY KEY, file INTEGER NOT NULL,
                                     start INTEGER NOT NULL, end INTEGER NOT NULL, heading TEXT,
                                     len INTEGER NOT NULL);
                 CREATE INDEX chunks_file ON chunks(file);
                 CREATE VIRTUAL TABLE terms USING fts5(heading, body, content='', contentless_delete=1,
                     tokenize=\"unicode61 remove_diacritics 0 tokenchars '_.'\");
                 INSERT INTO terms(terms, rank) VALUES ('rank', 'bm25({HEADING_WEIGHT:.1}, 1.0)');
                 CREATE VIRTUAL TABLE vocab USING fts5vocab(terms, 'row');
                 INSERT INTO meta VALUES ('version', {INDEX_VERSION});
                 {}
                 COMMIT;",
                champions::SCHEMA
            ))
            .map_err(err)?;
        }
        Ok(Index { conn, path, lists: champions::Lists::default() })
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> IndexError + '_ {
        |source| IndexError { path: self.path.clone(), source }
    }

    /// Brings the index up to date with the workspace's `context/` and rung's notes.
    pub fn update(&mut self, root: &Path) -> Result<Updated, IndexError> {
        let found = walk(root);
        let known: HashMap<String, (u64, i64)> = {
            let mut stmt = self.conn.prepare("SELECT path, len, stamp FROM files").map_err(self.err())?;
            let rows = stmt
                .query_map([], |r| Ok((r.get::<_, String>(0)?, (r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)?))))
                .map_err(self.err())?;
            rows.collect::<Result<_, _>>().map_err(self.err())?
        };
        let mut changed = Vec::new();
        let mut kept = 0;
        for f in &found {
            if known.get(&f.key) == Some(&(f.len, f.stamp)) {
                kept += usize::from(f.path.is_some());
            } else {
                changed.push(f);
            }
        }
        let seen: BTreeSet<&str> = found.iter().map(|f| f.key.as_str()).collect();
        let gone: Vec<&String> = known.keys().filter(|k| !seen.contains(k.as_str())).collect();
        // What happened to `context/`; rung's own notes are not counted.
        let stats = Updated {
            read: changed.iter().filter(|f| f.path.is_some()).count(),
            kept,
            dropped: gone.iter().filter(|k| !k.starts_with("rung:")).count(),
        };
        if changed.is_empty() && gone.is_empty() {
            return Ok(stats);
        }
        // Read and cut outside the transaction; a file that is not text is stored with no
        // passages, so it is not read again until it changes.
        let cut: Vec<(&Found, Vec<Chunk>)> = changed
            .iter()
            .map(|f| {
                let text = match &f.path {
                    Some(p) => std::fs::read_to_string(p).ok(),
                    None => read(root, &f.key),
                };
                (*f, text.map(|t| chunks(&t, &f.key)).unwrap_or_default())
            })
            .collect();
        let path = self.path.clone();
        let err = |source| IndexError { path: path.clone(), source };
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(err)?;
        // The passages' count and length in terms, as FTS5's bm25 has them (for the lists).
        let before = champions::Stats::read(&tx).map_err(err)?;
        let (mut after, mut dropped) = (before, (0, 0));
        let first_new: i64 =
            tx.query_row("SELECT coalesce(max(id), 0) + 1 FROM chunks", [], |r| r.get(0)).map_err(err)?;
        let mut added: Vec<(i64, &Chunk)> = Vec::new();
        let mut thinned = BTreeSet::new();
        {
            let mut held =
                tx.prepare("SELECT count(*), coalesce(sum(len), 0) FROM chunks WHERE file = ?1").map_err(err)?;
            let mut file_id = tx.prepare("SELECT id FROM files WHERE path = ?1").map_err(err)?;
            let mut del_terms =
                tx.prepare("DELETE FROM terms WHERE rowid IN (SELECT id FROM chunks WHERE file = ?1)").map_err(err)?;
            let mut del_chunks = tx.prepare("DELETE FROM chunks WHERE file = ?1").map_err(err)?;
            let mut del_file = tx.prepare("DELETE FROM files WHERE id = ?1").map_err(err)?;
            let mut add_file = tx.prepare("INSERT INTO files(path, len, stamp) VALUES (?1, ?2, ?3)").map_err(err)?;
            let mut add_chunk = tx
                .prepare("INSERT INTO chunks(file, start, end, heading, len) VALUES (?1, ?2, ?3, ?4, ?5)")
                .map_err(err)?;
            let mut add_terms =
                tx.prepare("INSERT INTO terms(rowid, heading, body) VALUES (?1, ?2, ?3)").map_err(err)?;
            // Another process may have updated the same files since the read above: each file
            // is dropped by its path first, so it is never stored twice.
            let drop = |key: &str| -> Result<(), rusqlite::Error> {
                if let Some(id) = file_id.query_row([key], |r| r.get::<_, i64>(0)).optional()? {
                    champions::drop_file(&tx, id, &mut thinned)?;
                    let (n, len) = held.query_row([id], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?;
                    dropped = (dropped.0 + n, dropped.1 + len);
                    del_terms.execute([id])?;
                    del_chunks.execute([id])?;
                    del_file.execute([id])?;
                }
                Ok(())
            };
            let mut drop = drop;
            for key in gone {
                drop(key).map_err(err)?;
            }
            for (f, cs) in &cut {
                drop(&f.key).map_err(err)?;
                add_file.execute(params![f.key, f.len as i64, f.stamp]).map_err(err)?;
                let id = tx.last_insert_rowid();
                for c in cs {
                    let len = champions::length(&c.head_terms) + champions::length(&c.body_terms);
                    add_chunk.execute(params![id, c.start as i64, c.end as i64, c.heading, len]).map_err(err)?;
                    let cid = tx.last_insert_rowid();
                    add_terms.execute(params![cid, c.head_terms, c.body_terms]).map_err(err)?;
                    added.push((cid, c));
                    after.passages += 1;
                    after.total_len += len;
                }
            }
        }
        after.passages -= dropped.0;
        after.total_len -= dropped.1;
        // How many new passages hold each term, and the best of them for the terms that may be common.
        let mut counts: HashMap<&str, i64> = HashMap::new();
        for (_, c) in &added {
            let mut terms: Vec<&str> = c.head_terms.split(' ').chain(c.body_terms.split(' ')).collect();
            terms.sort_unstable();
            terms.dedup();
            for t in terms.into_iter().filter(|t| !t.is_empty()) {
                *counts.entry(t).or_default() += 1;
            }
        }
        let mut batch = champions::Batch::new(self.lists, counts, before.passages);
        for (cid, c) in added {
            batch.add(cid, champions::weights(&c.head_terms, &c.body_terms, &after, HEADING_WEIGHT));
        }
        champions::store(&tx, batch, thinned, first_new, before.passages, &after, self.lists).map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(stats)
    }

    /// The best passages for `query`, best first, at most `limit` and at most about
    /// `budget_tokens` of text (four characters a token); the first passage is always returned
    /// whole. The index is not updated first ([`search`] does that).
    pub fn query(
        &self,
        root: &Path,
        query: &str,
        limit: usize,
        budget_tokens: usize,
    ) -> Result<Vec<Passage>, IndexError> {
        self.query_ranked(root, query, limit, budget_tokens, false)
    }

    /// [`Index::query`]; with `exact`, every passage that holds a query term is scored (FTS5's
    /// full ranking, whatever it costs): what the champion lists are measured against.
    pub fn query_ranked(
        &self,
        root: &Path,
        query: &str,
        limit: usize,
        budget_tokens: usize,
        exact: bool,
    ) -> Result<Vec<Passage>, IndexError> {
        let mut q = terms(query);
        q.sort();
        q.dedup();
        if q.is_empty() || limit == 0 {
            return Ok(vec![]);
        }
        let (known, spent) = self.frequencies(q)?;
        if known.is_empty() {
            return Ok(vec![]);
        }
        let quoted: Vec<String> = known.iter().map(|(t, _)| format!("\"{t}\"")).collect();
        let hits = if exact || spent <= self.lists.budget {
            // Few enough passages hold any of the terms: every one is scored (BM25 exactly).
            self.ranked(&quoted.join(" OR "), limit)?
        } else if let Some(hits) = self.candidate_hits(root, &known, limit)? {
            hits
        } else {
            // Common terms with no lists (yet): passages holding all the terms first, then all
            // but the most common, and so on, until `limit` are found.
            let mut hits: Vec<(i64, f64)> = Vec::new();
            for n in (1..=known.len()).rev() {
                for h in self.ranked(&quoted[..n].join(" AND "), limit)? {
                    if !hits.iter().any(|(id, _)| *id == h.0) {
                        hits.push(h);
                    }
                }
                if hits.len() >= limit {
                    break;
                }
            }
            hits.truncate(limit);
            hits
        };
        let mut rows = Vec::new();
        for (id, score) in hits {
            if let Some((path, start, end, heading)) = self.chunk(id)? {
                rows.push((path, start, end, heading, score));
            }
        }
        let mut texts: HashMap<String, Option<String>> = HashMap::new();
        let mut out = Vec::new();
        let mut spent = 0;
        for (key, start, end, section, score) in rows {
            let Some(whole) = texts.entry(key.clone()).or_insert_with(|| read(root, &key)) else { continue };
            let text = whole.lines().skip(start).take(end - start).collect::<Vec<_>>().join("\n");
            let cost = text.chars().count().div_ceil(4);
            if !out.is_empty() && spent + cost > budget_tokens {
                break;
            }
            spent += cost;
            out.push(Passage {
                path: PathBuf::from(key),
                line: start + 1,
                section,
                text: text.trim_end().to_string(),
                score,
            });
        }
        Ok(out)
    }

    /// A passage's file key, line range and section.
    fn chunk(&self, id: i64) -> Result<Option<Place>, IndexError> {
        let mut chunk = self
            .conn
            .prepare_cached(
                "SELECT f.path, c.start, c.end, c.heading FROM chunks c JOIN files f ON f.id = c.file WHERE c.id = ?1",
            )
            .map_err(self.err())?;
        chunk
            .query_row([id], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)? as usize,
                    r.get::<_, i64>(2)? as usize,
                    r.get::<_, Option<String>>(3)?,
                ))
            })
            .optional()
            .map_err(self.err())
    }

    /// The query's terms the index has, rarest first, with how many passages hold each, and
    /// how many passages hold them (summed over the terms).
    fn frequencies(&self, q: Vec<String>) -> Result<(Vec<(String, i64)>, i64), IndexError> {
        let mut df = self.conn.prepare_cached("SELECT doc FROM vocab WHERE term = ?1").map_err(self.err())?;
        let mut known = Vec::new();
        for t in q {
            let n: Option<i64> = df.query_row([&t], |r| r.get(0)).optional().map_err(self.err())?;
            if let Some(n) = n.filter(|n| *n > 0) {
                known.push((n, t));
            }
        }
        known.sort();
        let spent = known.iter().map(|(n, _)| n).sum();
        Ok((known.into_iter().map(|(n, t)| (t, n)).collect(), spent))
    }

    /// The best `limit` passages for a MATCH expression: FTS5 ranks on its own table (the
    /// `rank` column is bm25 with the heading's weight), best first, with their scores.
    fn ranked(&self, expr: &str, limit: usize) -> Result<Vec<(i64, f64)>, IndexError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT rowid, -rank FROM terms WHERE terms MATCH ?1 ORDER BY rank LIMIT ?2")
            .map_err(self.err())?;
        stmt.query_map(params![expr, limit as i64], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)?)))
            .map_err(self.err())?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.err())
    }

    /// What the index holds, by the first folder under `context/` (`rung` for rung's notes):
    /// files, their bytes and passages, and the index's own size on disk.
    pub fn holdings(&self) -> Result<(Vec<Holding>, u64), IndexError> {
        let mut stmt = self
            .conn
            .prepare("SELECT f.path, f.len, (SELECT count(*) FROM chunks c WHERE c.file = f.id) FROM files f")
            .map_err(self.err())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as usize)))
            .map_err(self.err())?;
        let mut by: std::collections::BTreeMap<String, Holding> = std::collections::BTreeMap::new();
        for row in rows {
            let (path, len, passages) = row.map_err(self.err())?;
            let top = if path.starts_with("rung:") {
                "rung".to_string()
            } else {
                let rest = path.strip_prefix("context/").unwrap_or(&path);
                match rest.split_once('/') {
                    Some((top, _)) => top.to_string(),
                    None => rest.to_string(),
                }
            };
            let h = by.entry(top.clone()).or_insert_with(|| Holding { top, ..Holding::default() });
            h.files += 1;
            h.bytes += len;
            h.passages += passages;
        }
        let db = self.path.to_string_lossy().into_owned();
        let size = ["", "-wal", "-shm"]
            .iter()
            .filter_map(|s| std::fs::metadata(format!("{db}{s}")).ok())
            .map(|m| m.len())
            .sum();
        Ok((by.into_values().collect(), size))
    }
}

/// What the index holds of one entry of `context/` (or of rung's notes, `top` = `rung`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Holding {
    pub top: String,
    pub files: usize,
    pub bytes: u64,
    pub passages: usize,
}

/// Updates the workspace's index and returns what that did (the search does the same first).
pub fn refresh(root: &Path, state_dir: &Path) -> Result<Updated, IndexError> {
    Index::open(state_dir)?.update(root)
}

/// The best passages for `query` from the workspace's `context/` and rung's notes, after
/// bringing the index up to date ([`Index::query`]).
pub fn search(
    root: &Path,
    state_dir: &Path,
    query: &str,
    limit: usize,
    budget_tokens: usize,
) -> Result<Vec<Passage>, IndexError> {
    if terms(query).is_empty() {
        return Ok(vec![]);
    }
    let mut index = Index::open(state_dir)?;
    index.update(root)?;
    index.query(root, query, limit, budget_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_split_identifiers_and_dotted_names_and_drop_short_words() {
        assert_eq!(
            terms("cp_async_bulk a LDG.E.128 cp.async.bulk.tensor."),
            [
                "cp",
                "async",
                "bulk",
                "cp_async_bulk",
                "ldg.e.128",
                "ldg",
                "128",
                "cp.async.bulk.tensor",
                "cp",
                "async",
                "bulk",
                "tensor"
            ]
        );
        assert_eq!(terms("end of it... x"), ["end", "of", "it"]);
    }

    #[test]
    fn passages_end_at_paragraphs_at_their_longest_and_at_headings() {
        let text = "ab cd\nef gh\nij kl\nmn op\n\nnext one\n".to_string() + &"xy zw\n".repeat(30);
        let c = chunks(&text, "notes.txt");
        assert_eq!((c[0].start, c[0].end), (0, 5));
        assert!(c.iter().all(|c| c.end - c.start <= MAX_LINES));
        assert_eq!(c.last().unwrap().end, text.lines().count());
        assert!(c.iter().all(|c| c.heading.is_none() && c.head_terms == "notes.txt notes txt"));
        let md = "# Intro\nsome words\n## cp.async.bulk\nCopies a bulk.\n#include is no heading\n";
        let c = chunks(md, "context/ptx.md");
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!((c[0].start, c[0].end, c[0].heading.as_deref()), (0, 2, Some("Intro")));
        assert_eq!((c[1].start, c[1].end, c[1].heading.as_deref()), (2, 5, Some("cp.async.bulk")));
        assert!(c[1].head_terms.ends_with("cp.async.bulk cp async bulk"), "{}", c[1].head_terms);
        // In a source file a `#` line is the preprocessor's.
        assert!(chunks("#define X 1\nint x;\n", "a.cu").iter().all(|c| c.heading.is_none()));
    }
}
