//! Champion lists: for each term in more than [`COMMON`] passages, the [`CHAMPIONS`] passages
//! where it weighs most, kept at index time, so a query whose every term is that common scores a
//! few hundred candidates instead of every passage that holds its terms.
//!
//! FTS5 ranks by scoring every passage that matches (about a microsecond each): a query of words
//! that are in most of a large tree's passages (`template`, `arrive wait cluster` in a generated
//! tree where each is in 70–99% of them) takes 100–260 ms. A term's weight in a passage is BM25's
//! term-frequency part (FTS5's k1 and b, the heading column weighted as in the index's rank),
//! which orders the passages for that term alone. A query's candidates are the union of its terms'
//! lists, ordered by the sum of their weights times each term's IDF; the best few are scored again
//! exactly by [`score`] from their text (the passage is read to be returned anyway) before the
//! best `limit` are kept. A passage that is in no list of the query's terms is missed: that is the
//! approximation, measured in `benches/context.rs` against FTS5's full ranking.
//!
//! Lists are kept up to date: a new passage enters a list when it weighs more than the list's
//! least; a dropped passage leaves every list, and a list that falls under half its length is made
//! again from FTS5's own ranking of that term. A term that becomes common in a later update gets
//! its list from the update's passages and FTS5's ranking of the passages before them.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use std::path::Path;

use rusqlite::{OptionalExtension, Transaction, params};

use super::{HEADING_WEIGHT, Index, IndexError, name_terms, passage_terms, read};

/// How many passages a common term's list keeps.
pub const CHAMPIONS: usize = 1024;
/// A term in more passages than this has a list.
pub const COMMON: i64 = 10_000;

/// When a term has a list, and how long it is ([`COMMON`], [`CHAMPIONS`]), and how many
/// passages a query's terms may be in for all of them to be scored ([`super::POSTINGS_BUDGET`]);
/// smaller in tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lists {
    pub common: i64,
    pub keep: usize,
    pub budget: i64,
}

impl Default for Lists {
    fn default() -> Lists {
        Lists { common: COMMON, keep: CHAMPIONS, budget: super::POSTINGS_BUDGET }
    }
}
/// FTS5's bm25 constants.
const K1: f64 = 1.2;
const B: f64 = 0.75;

pub const SCHEMA: &str = "CREATE TABLE champions(term TEXT NOT NULL, chunk INTEGER NOT NULL, weight REAL NOT NULL,
                                                 PRIMARY KEY(term, chunk)) WITHOUT ROWID;
                          CREATE INDEX champions_chunk ON champions(chunk);";

/// The index's passage count and their length (in terms, heading and text together, as FTS5's
/// bm25 counts a row), kept in `meta` by each update.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    pub passages: i64,
    pub total_len: i64,
}

/// A stored column's length in terms (FTS5's tokens: rung's terms, space-separated).
pub fn length(terms: &str) -> i64 {
    terms.split(' ').filter(|t| !t.is_empty()).count() as i64
}

impl Stats {
    pub fn read(tx: &rusqlite::Connection) -> rusqlite::Result<Stats> {
        let get = |k: &str| -> rusqlite::Result<i64> {
            Ok(tx
                .query_row("SELECT value FROM meta WHERE key = ?1", [k], |r| r.get::<_, i64>(0))
                .optional()?
                .unwrap_or(0))
        };
        Ok(Stats { passages: get("passages")?, total_len: get("total_len")? })
    }

    fn avg_len(&self) -> f64 {
        if self.passages > 0 { (self.total_len as f64 / self.passages as f64).max(1e-3) } else { 1.0 }
    }

    fn write(&self, tx: &Transaction) -> rusqlite::Result<()> {
        let mut put = tx.prepare_cached("INSERT OR REPLACE INTO meta(key, value) VALUES (?1, ?2)")?;
        put.execute(params!["passages", self.passages])?;
        put.execute(params!["total_len", self.total_len])?;
        Ok(())
    }
}

/// FTS5's IDF: `ln((N - n + 0.5) / (n + 0.5))`, floored at 1e-6 for a term in half the passages.
pub fn idf(passages: i64, holding: i64) -> f64 {
    let v = ((passages - holding) as f64 + 0.5) / (holding as f64 + 0.5);
    let v = v.ln();
    if v <= 0.0 { 1e-6 } else { v }
}

/// Each term's weight in a passage of these heading and body terms (space-separated, as stored),
/// as FTS5's bm25 weighs it before the IDF: the term's count in each column times the column's
/// weight, summed (`f`), against the row's length in terms (`d`): `f(k1+1) / (f + k1(1-b+b d/avg))`.
pub fn weights<'a>(head: &'a str, body: &'a str, stats: &Stats, heading_weight: f64) -> HashMap<&'a str, f64> {
    fn count(s: &str) -> (HashMap<&str, usize>, usize) {
        let mut m: HashMap<&str, usize> = HashMap::new();
        let mut n = 0;
        for t in s.split(' ').filter(|t| !t.is_empty()) {
            *m.entry(t).or_default() += 1;
            n += 1;
        }
        (m, n)
    }
    let ((h, hl), (b, bl)) = (count(head), count(body));
    let mut f: HashMap<&str, f64> = HashMap::new();
    for (t, n) in &h {
        *f.entry(t).or_default() += heading_weight * *n as f64;
    }
    for (t, n) in &b {
        *f.entry(t).or_default() += *n as f64;
    }
    let norm = K1 * (1.0 - B + B * (hl + bl) as f64 / stats.avg_len());
    f.into_iter().map(|(t, f)| (t, f * (K1 + 1.0) / (f + norm))).collect()
}

/// BM25 of a passage for these query terms (with the passages holding each), as FTS5's rank
/// computes it with the index's averages.
pub fn score(head: &str, body: &str, query: &[(String, i64)], stats: &Stats, heading_weight: f64) -> f64 {
    let w = weights(head, body, stats, heading_weight);
    query.iter().map(|(t, n)| w.get(t.as_str()).map_or(0.0, |w| w * idf(stats.passages, *n))).sum()
}

/// A term's best passages so far: (weight's bits, passage), least on top.
type Best = BinaryHeap<Reverse<(u64, i64)>>;

/// The best passages of one update's new ones, for each term that may be common.
pub struct Batch {
    keep: usize,
    best: HashMap<String, Best>,
}

impl Batch {
    /// For the terms that may be common once the update's passages are in: those in more than
    /// `lists.common - before` of them (`counts`); the others keep no passages here.
    pub fn new(lists: Lists, counts: HashMap<&str, i64>, before: i64) -> Batch {
        let best = counts
            .into_iter()
            .filter(|(_, n)| n + before > lists.common)
            .map(|(t, _)| (t.to_string(), BinaryHeap::new()))
            .collect();
        Batch { keep: lists.keep, best }
    }

    /// Adds a new passage's terms with their weights.
    pub fn add(&mut self, chunk: i64, weights: HashMap<&str, f64>) {
        for (t, w) in weights {
            let Some(heap) = self.best.get_mut(t) else { continue };
            // A positive f64's bits order as the number does.
            let item = Reverse((w.max(0.0).to_bits(), chunk));
            if heap.len() < self.keep {
                heap.push(item);
            } else if heap.peek().is_some_and(|least| item < *least) {
                heap.pop();
                heap.push(item);
            }
        }
    }
}

/// Stores the lists after an update: `batch` holds the passages it added (numbered from
/// `first_new`), `thinned` the terms whose lists lost passages; `stats` are the index's figures
/// after the update.
pub fn store(
    tx: &Transaction,
    batch: Batch,
    thinned: BTreeSet<String>,
    first_new: i64,
    before: i64,
    stats: &Stats,
    lists: Lists,
) -> rusqlite::Result<()> {
    let Lists { common, keep, .. } = lists;
    let listed: BTreeSet<String> = {
        let mut s = tx.prepare("SELECT DISTINCT term FROM champions")?;
        s.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?
    };
    for (term, heap) in batch.best {
        // A term new to the lists: its passages before the update join the update's best. (On a
        // first build the batch holds only terms that are common.)
        let older = if listed.contains(&term) || before == 0 {
            None
        } else {
            match holding(tx, &term)? {
                held if held <= common => continue,
                held => Some(held),
            }
        };
        let mut add = tx.prepare_cached(ADD)?;
        for Reverse((w, chunk)) in heap {
            add.execute(params![term, chunk, f64::from_bits(w)])?;
        }
        if let Some(held) = older {
            from_fts(tx, &term, held, first_new, stats, keep)?;
        }
        trim(tx, &term, keep)?;
    }
    for term in thinned {
        let len: i64 = tx.query_row("SELECT count(*) FROM champions WHERE term = ?1", [&term], |r| r.get(0))?;
        if len >= (keep / 2) as i64 {
            continue;
        }
        tx.execute("DELETE FROM champions WHERE term = ?1", [&term])?;
        let held = holding(tx, &term)?;
        if held > common {
            from_fts(tx, &term, held, i64::MAX, stats, keep)?;
            trim(tx, &term, keep)?;
        }
    }
    stats.write(tx)
}

const ADD: &str = "INSERT OR REPLACE INTO champions(term, chunk, weight) VALUES (?1, ?2, ?3)";

/// How many passages hold `term`.
fn holding(tx: &Transaction, term: &str) -> rusqlite::Result<i64> {
    let mut df = tx.prepare_cached("SELECT doc FROM vocab WHERE term = ?1")?;
    Ok(df.query_row([term], |r| r.get(0)).optional()?.unwrap_or(0))
}

/// Keeps a list's best `keep`.
fn trim(tx: &Transaction, term: &str, keep: usize) -> rusqlite::Result<()> {
    let mut trim = tx.prepare_cached(
        "DELETE FROM champions WHERE term = ?1 AND chunk IN
             (SELECT chunk FROM champions WHERE term = ?1 ORDER BY weight DESC LIMIT -1 OFFSET ?2)",
    )?;
    trim.execute(params![term, keep as i64])?;
    Ok(())
}

/// Adds to `term`'s list (in `held` passages) its best passages numbered below `below` by FTS5's
/// own ranking (its rank divided by the term's IDF is the weight).
fn from_fts(tx: &Transaction, term: &str, held: i64, below: i64, stats: &Stats, keep: usize) -> rusqlite::Result<()> {
    let idf = idf(stats.passages, held);
    let mut fts =
        tx.prepare_cached("SELECT rowid, -rank FROM terms WHERE terms MATCH ?1 AND rowid < ?2 ORDER BY rank LIMIT ?3")?;
    let rows: Vec<(i64, f64)> = fts
        .query_map(params![format!("\"{term}\""), below, keep as i64], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    let mut add = tx.prepare_cached(ADD)?;
    for (chunk, s) in rows {
        add.execute(params![term, chunk, s / idf])?;
    }
    Ok(())
}

/// Drops a file's passages from every list; the terms whose lists lost one.
pub fn drop_file(tx: &Transaction, file: i64, thinned: &mut BTreeSet<String>) -> rusqlite::Result<()> {
    let mut del = tx.prepare_cached(
        "DELETE FROM champions WHERE chunk IN (SELECT id FROM chunks WHERE file = ?1) RETURNING term",
    )?;
    let terms = del.query_map([file], |r| r.get::<_, String>(0))?;
    for t in terms {
        thinned.insert(t?);
    }
    Ok(())
}

/// A query's candidates from the lists of its terms (each with the passages holding it; a term
/// with no list adds none), best first by the sum of their weights times the terms' IDF, at most
/// `take`.
pub fn candidates(
    conn: &rusqlite::Connection,
    query: &[(String, i64)],
    passages: i64,
    take: usize,
) -> rusqlite::Result<Vec<i64>> {
    let mut list = conn.prepare_cached("SELECT chunk, weight FROM champions WHERE term = ?1")?;
    let mut sum: HashMap<i64, f64> = HashMap::new();
    for (t, n) in query {
        // Selection only: an IDF that stays positive, so common terms still count.
        let idf = (1.0 + ((passages - n) as f64 + 0.5) / (*n as f64 + 0.5)).ln();
        for row in list.query_map([t], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, f64>(1)?)))? {
            let (c, w) = row?;
            *sum.entry(c).or_default() += w * idf;
        }
    }
    let mut v: Vec<(i64, f64)> = sum.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    Ok(v.into_iter().take(take).map(|(c, _)| c).collect())
}

impl Index {
    /// The best `limit` passages for terms too common to score every passage that holds one
    /// (each with the passages holding it, rarest first). The candidates: the best passages for
    /// the rarest terms alone, as many terms as [`super::POSTINGS_BUDGET`] scores exactly, and the
    /// common terms' champion lists' best; each is scored by BM25 for all the terms from its
    /// text, as FTS5 would. `None` when there is no candidate (common terms with no lists).
    pub(super) fn candidate_hits(
        &self,
        root: &Path,
        known: &[(String, i64)],
        limit: usize,
    ) -> Result<Option<Vec<(i64, f64)>>, IndexError> {
        let take = (limit * 4).max(32);
        let mut ids = Vec::new();
        let (mut spent, mut rare) = (0, Vec::new());
        for (t, n) in known.iter().take_while(|(_, n)| *n <= self.lists.common) {
            if spent + n > self.lists.budget {
                break;
            }
            spent += n;
            rare.push(format!("\"{t}\""));
        }
        if !rare.is_empty() {
            ids.extend(self.ranked(&rare.join(" OR "), take)?.into_iter().map(|(id, _)| id));
        }
        let stats = Stats::read(&self.conn).map_err(self.err())?;
        let common: Vec<(String, i64)> = known.iter().filter(|(_, n)| *n > self.lists.common).cloned().collect();
        if !common.is_empty() {
            ids.extend(candidates(&self.conn, &common, stats.passages, take).map_err(self.err())?);
        }
        if ids.is_empty() {
            return Ok(None);
        }
        ids.sort_unstable();
        ids.dedup();
        let mut texts: HashMap<String, Option<String>> = HashMap::new();
        let mut scored = Vec::new();
        for id in ids {
            let Some((key, start, end, heading)) = self.chunk(id)? else { continue };
            let Some(whole) = texts.entry(key.clone()).or_insert_with(|| read(root, &key)) else { continue };
            let lines: Vec<&str> = whole.lines().skip(start).take(end - start).collect();
            let (head, body) = passage_terms(&lines, &name_terms(&key), heading.as_deref());
            scored.push((id, score(&head, &body, known, &stats, HEADING_WEIGHT)));
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(limit);
        Ok(Some(scored))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTS: Lists = Lists { common: 50, keep: 16, budget: 40 };

    /// A passage: its first line, then three lines of words no other passage has.
    fn passage(first: &str, n: usize) -> String {
        format!("{first}\nfill{n}a fill{n}b\nfill{n}c fill{n}d\nfill{n}e\n\n")
    }

    /// Writes `context/NAME.txt` with passages whose first lines hold `alpha` and `beta` a
    /// number of times that varies with `seed`, so scores rarely tie.
    fn file(ws: &Path, name: &str, seed: usize, extra: &str) {
        let mut text = String::new();
        for j in 0..3 {
            let n = seed * 3 + j;
            let words = format!(
                "{} {} {} pad{n}",
                "alpha ".repeat(1 + n % 3),
                "beta ".repeat(1 + (n / 3) % 3),
                "pad ".repeat(n % 7)
            );
            text += &passage(&format!("{words} {extra}"), n);
        }
        std::fs::create_dir_all(ws.join("context")).unwrap();
        std::fs::write(ws.join("context").join(format!("{name}.txt")), text).unwrap();
    }

    fn open(ws: &Path) -> Index {
        let mut index = Index::open(&ws.join(".rung")).unwrap();
        index.lists = LISTS;
        index
    }

    fn places(index: &Index, ws: &Path, q: &str, exact: bool, n: usize) -> Vec<(String, f64)> {
        let found = index.query_ranked(ws, q, n, usize::MAX / 8, exact);
        found.unwrap().into_iter().map(|p| (p.place(), p.score)).collect()
    }

    /// The lists' best 5 for `q`: each scored as FTS5 scores it, and together at least 95% of
    /// FTS5's best 5 (a passage of middling weight in every term may be in no list). Returned.
    fn agrees(index: &Index, ws: &Path, q: &str) -> Vec<(String, f64)> {
        let fast = places(index, ws, q, false, 5);
        let all = places(index, ws, q, true, 1000);
        assert_eq!(fast.len(), 5, "{q}");
        for (place, score) in &fast {
            let exact = all.iter().find(|p| p.0 == *place).map(|p| p.1);
            assert!(exact.is_some_and(|e| (e - score).abs() <= 1e-9 * e), "{q}: {place} {score} against {exact:?}");
        }
        let sum = |v: &[(String, f64)]| v.iter().map(|p| p.1).sum::<f64>();
        assert!(sum(&fast) >= 0.95 * sum(&all[..5]), "{q}: {fast:?} against {:?}", &all[..5]);
        fast
    }

    fn listed(index: &Index, term: &str) -> i64 {
        index.conn.query_row("SELECT count(*) FROM champions WHERE term = ?1", [term], |r| r.get(0)).unwrap()
    }

    fn dangling(index: &Index) -> i64 {
        index
            .conn
            .query_row("SELECT count(*) FROM champions WHERE chunk NOT IN (SELECT id FROM chunks)", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn common_terms_are_answered_from_their_lists_as_the_full_ranking_would() {
        let ws = tempfile::tempdir().unwrap();
        for i in 0..40 {
            file(ws.path(), &format!("f{i}"), i, "");
        }
        let mut index = open(ws.path());
        index.update(ws.path()).unwrap();
        assert_eq!((listed(&index, "alpha"), listed(&index, "beta")), (16, 16));
        assert_eq!(listed(&index, "pad0"), 0, "a rare term has no list");
        for q in ["alpha beta", "alpha pad"] {
            agrees(&index, ws.path(), q);
        }
        // A rare term beside common ones: the rare term's passages lead, the rest still come.
        let text = passage("zeta alpha", 800) + &passage("zeta beta", 801);
        std::fs::write(ws.path().join("context/rare.txt"), text).unwrap();
        index.update(ws.path()).unwrap();
        let mixed = agrees(&index, ws.path(), "zeta alpha beta");
        assert!(mixed[..2].iter().all(|p| p.0.starts_with("context/rare.txt")), "{mixed:?}");
        // One term: its list is its best passages, so the answer is FTS5's whole.
        assert_eq!(places(&index, ws.path(), "alpha", false, 5), places(&index, ws.path(), "alpha", true, 5));

        // A new passage that weighs more than any joins the lists; when its file goes, so does it.
        std::fs::write(ws.path().join("context/best.txt"), passage("alpha alpha alpha beta beta beta", 999)).unwrap();
        index.update(ws.path()).unwrap();
        assert!(agrees(&index, ws.path(), "alpha beta")[0].0.starts_with("context/best.txt:1"));
        assert_eq!(listed(&index, "alpha"), 16, "the list stays at its length");
        std::fs::remove_file(ws.path().join("context/best.txt")).unwrap();
        index.update(ws.path()).unwrap();
        assert_eq!(dangling(&index), 0);
        assert!(!agrees(&index, ws.path(), "alpha beta").iter().any(|p| p.0.contains("best.txt")));
    }

    #[test]
    fn a_term_that_becomes_common_later_has_its_best_earlier_passages_in_its_list() {
        let ws = tempfile::tempdir().unwrap();
        for i in 0..30 {
            file(ws.path(), &format!("f{i}"), i, "");
        }
        // The best passage for `delta` is in the first build, while `delta` is rare.
        std::fs::write(ws.path().join("context/early.txt"), passage("delta delta delta", 500)).unwrap();
        let mut index = open(ws.path());
        index.update(ws.path()).unwrap();
        assert_eq!(listed(&index, "delta"), 0);
        for i in 30..55 {
            file(ws.path(), &format!("f{i}"), i, "delta");
        }
        index.update(ws.path()).unwrap();
        assert_eq!(listed(&index, "delta"), 16);
        let fast = places(&index, ws.path(), "delta", false, 5);
        assert!(fast[0].0.starts_with("context/early.txt:1"), "{fast:?}");
        assert_eq!(fast, places(&index, ws.path(), "delta", true, 5));
    }

    #[test]
    fn a_list_that_loses_half_its_passages_is_made_again() {
        let ws = tempfile::tempdir().unwrap();
        for i in 0..40 {
            file(ws.path(), &format!("f{i}"), i, "");
        }
        // Two files hold the best passages for `alpha`: all 16 of its list.
        for name in ["dense1", "dense2"] {
            let text: String = (0..9).map(|n| passage("alpha alpha alpha", 700 + n)).collect();
            std::fs::write(ws.path().join(format!("context/{name}.txt")), text).unwrap();
        }
        let mut index = open(ws.path());
        index.update(ws.path()).unwrap();
        let dense: i64 = index
            .conn
            .query_row(
                "SELECT count(*) FROM champions h JOIN chunks c ON c.id = h.chunk JOIN files f ON f.id = c.file
                 WHERE h.term = 'alpha' AND f.path LIKE '%dense%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(dense, 16);
        for name in ["dense1", "dense2"] {
            std::fs::remove_file(ws.path().join(format!("context/{name}.txt"))).unwrap();
        }
        index.update(ws.path()).unwrap();
        assert_eq!((listed(&index, "alpha"), dangling(&index)), (16, 0), "made again from FTS5's ranking");
        assert_eq!(places(&index, ws.path(), "alpha", false, 5), places(&index, ws.path(), "alpha", true, 5));
    }

    #[test]
    fn weights_follow_fts5_bm25_with_the_heading_weighted() {
        let stats = Stats { passages: 100, total_len: 1000 };
        let w = weights("name", "name x y", &stats, 4.0);
        // f = 4·1 + 1 = 5, d = 4: 5·2.2 / (5 + 1.2·(0.25 + 0.75·0.4)).
        assert!((w["name"] - 11.0 / (5.0 + 1.2 * 0.55)).abs() < 1e-12, "{w:?}");
        assert!((idf(100, 10) - (90.5f64 / 10.5).ln()).abs() < 1e-12);
        assert_eq!(idf(100, 60), 1e-6, "a term in most passages is floored as FTS5 floors it");
    }
}
