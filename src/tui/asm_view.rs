//! The assembly pane's state: which listing (PTX or SASS) of the selected version is compared with
//! which other version, the kernel filter, the scroll position, and the diffs. A diff is computed
//! off the UI thread (a 100,000-line SASS listing takes a while to parse and diff) and cached by
//! what it was computed from: the two versions' dump files as they are on disk (name, length and
//! modification time), so a rebuild that rewrites a listing makes a new diff and one that does
//! not reuses the old.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use rung_core::asm::diff::{AsmDiff, KernelDiff, Row};
use rung_core::asm::{self, AsmKind, Normalize};

/// How many computed diffs are kept: enough to move between a few versions and back.
const CACHED: usize = 8;

/// What the selected version is compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Against {
    /// The version it was made from (recorded for agent proposals), else the one listed before it.
    Parent,
    /// The fastest approved version, else the fastest version with a bench.
    Best,
    Version(String),
}

impl Against {
    pub fn name(&self) -> String {
        match self {
            Against::Parent => "parent".into(),
            Against::Best => "best".into(),
            Against::Version(id) => id.clone(),
        }
    }
}

/// A version's listing as it is on disk: the files and, per file, its length and modification
/// time in nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub id: String,
    pub files: Vec<(PathBuf, u64, u128)>,
}

impl Listing {
    /// `None` when the version has no listing of this kind.
    pub fn stat(state_dir: &Path, id: &str, kind: AsmKind) -> Option<Listing> {
        let files = rung_core::workspace::dump_files(state_dir, id, kind.ext());
        if files.is_empty() {
            return None;
        }
        let files = files
            .into_iter()
            .map(|p| {
                let meta = std::fs::metadata(&p).ok();
                let len = meta.as_ref().map_or(0, |m| m.len());
                let mtime = meta
                    .and_then(|m| m.modified().ok())
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                (p, len, mtime)
            })
            .collect();
        Some(Listing { id: id.to_string(), files })
    }

    fn read(&self) -> std::io::Result<String> {
        let mut text = String::new();
        for (p, _, _) in &self.files {
            text.push_str(&std::fs::read_to_string(p)?);
            text.push('\n');
        }
        Ok(text)
    }
}

/// Everything a diff depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffKey {
    pub kind: AsmKind,
    pub registers: bool,
    /// `None`: the other version has no listing, and the selected one is shown alone.
    pub left: Option<Listing>,
    pub right: Listing,
}

/// A computed diff.
#[derive(Debug)]
pub struct LoadedDiff {
    pub key: DiffKey,
    pub diff: AsmDiff,
    /// Reading, parsing and diffing took this long.
    pub took: Duration,
    /// A listing could not be read (the diff is then empty).
    pub error: Option<String>,
}

/// Reads, parses and diffs the two listings: run on a thread of its own.
pub fn compute(key: DiffKey) -> LoadedDiff {
    let started = Instant::now();
    let read = |l: &Listing| l.read().map_err(|e| format!("reading {}'s {}: {e}", l.id, key.kind.label()));
    let texts = (key.left.as_ref().map(read).transpose(), read(&key.right));
    let (diff, error) = match texts {
        (Ok(left), Ok(right)) => {
            let l = left.map(|t| asm::parse(key.kind, &t)).unwrap_or_default();
            let r = asm::parse(key.kind, &right);
            (asm::diff::diff(key.kind, &l, &r, Normalize { registers: key.registers }), None)
        }
        (Err(e), _) | (_, Err(e)) => (AsmDiff { kind: key.kind, kernels: vec![] }, Some(e)),
    };
    LoadedDiff { key, diff, took: started.elapsed(), error }
}

/// One row of the pane's listing: a kernel's heading, or a row of its diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flat {
    Heading(usize),
    Row(usize, usize),
}

pub struct AsmView {
    pub kind: AsmKind,
    pub against: Against,
    /// Only this kernel (by name); `None`: every kernel.
    pub kernel: Option<String>,
    /// Registers renamed by first use before comparing.
    pub registers: bool,
    /// The first row on screen.
    pub scroll: usize,
    /// Characters of each listing's text scrolled off to the left.
    pub column: usize,
    /// The diff that belongs on screen now; `None` with `why_not` when there is nothing to diff.
    pub wanted: Option<DiffKey>,
    pub why_not: Option<String>,
    /// The diff on screen (while a new one is computed, the previous one stays, marked).
    pub shown: Option<Arc<LoadedDiff>>,
    /// The rows of `shown` under the kernel filter, in order, and where each hunk starts.
    pub rows: Vec<Flat>,
    pub hunks: Vec<usize>,
    cache: VecDeque<Arc<LoadedDiff>>,
    pending: Vec<DiffKey>,
}

impl Default for AsmView {
    fn default() -> AsmView {
        AsmView {
            kind: AsmKind::Sass,
            against: Against::Parent,
            kernel: None,
            registers: false,
            scroll: 0,
            column: 0,
            wanted: None,
            why_not: None,
            shown: None,
            rows: vec![],
            hunks: vec![],
            cache: VecDeque::new(),
            pending: vec![],
        }
    }
}

/// What [`AsmView::want`] asks of its caller.
#[derive(Debug, PartialEq, Eq)]
pub enum Need {
    Nothing,
    /// Compute this diff (on a thread) and hand it to [`AsmView::arrived`].
    Compute(DiffKey),
}

impl AsmView {
    /// Sets what belongs on screen; shows it at once from the cache, or asks for it to be
    /// computed (once: a diff already being computed is not asked for again).
    pub fn want(&mut self, wanted: Result<DiffKey, String>) -> Need {
        let key = match wanted {
            Ok(k) => k,
            Err(why) => {
                self.wanted = None;
                self.why_not = Some(why);
                self.show(None);
                return Need::Nothing;
            }
        };
        self.why_not = None;
        if self.wanted.as_ref() == Some(&key) && self.shown.as_ref().is_some_and(|s| s.key == key) {
            return Need::Nothing;
        }
        self.wanted = Some(key.clone());
        if let Some(hit) = self.cache.iter().find(|d| d.key == key).cloned() {
            self.show(Some(hit));
            return Need::Nothing;
        }
        if self.pending.contains(&key) {
            return Need::Nothing;
        }
        self.pending.push(key.clone());
        Need::Compute(key)
    }

    /// A computed diff: cached, and shown when it is still the one wanted.
    pub fn arrived(&mut self, d: Arc<LoadedDiff>) {
        self.pending.retain(|k| *k != d.key);
        self.cache.retain(|c| c.key != d.key);
        if self.cache.len() == CACHED {
            self.cache.pop_front();
        }
        self.cache.push_back(d.clone());
        if self.wanted.as_ref() == Some(&d.key) {
            self.show(Some(d));
        }
    }

    /// Whether the diff on screen is not the one wanted (a newer one is being computed).
    pub fn stale(&self) -> bool {
        match (&self.wanted, &self.shown) {
            (Some(w), Some(s)) => *w != s.key,
            (Some(_), None) => true,
            _ => false,
        }
    }

    fn show(&mut self, d: Option<Arc<LoadedDiff>>) {
        // The same pair of versions again (a rebuild): keep the place; another pair: the top.
        let same_pair = match (&self.shown, &d) {
            (Some(a), Some(b)) => {
                a.key.right.id == b.key.right.id
                    && a.key.left.as_ref().map(|l| &l.id) == b.key.left.as_ref().map(|l| &l.id)
            }
            _ => false,
        };
        self.shown = d;
        if !same_pair {
            self.scroll = 0;
        }
        self.refilter();
    }

    /// Rebuilds the flat rows and hunk starts for the kernel filter.
    pub fn refilter(&mut self) {
        self.rows.clear();
        self.hunks.clear();
        let Some(d) = self.shown.clone() else { return };
        // A filter that names no kernel of this diff (another pair of versions) is dropped.
        if self.kernel.as_ref().is_some_and(|name| !d.diff.kernels.iter().any(|k| kernel_name(k) == name)) {
            self.kernel = None;
        }
        for (k, kd) in d.diff.kernels.iter().enumerate() {
            if self.kernel.as_ref().is_some_and(|name| kernel_name(kd) != name) {
                continue;
            }
            self.rows.push(Flat::Heading(k));
            let base = self.rows.len();
            self.hunks.extend(kd.hunks.iter().map(|(start, _)| base + start));
            self.rows.extend((0..kd.rows.len()).map(|r| Flat::Row(k, r)));
        }
        self.scroll = self.scroll.min(self.rows.len().saturating_sub(1));
    }

    /// The kernels of the diff on screen, by name.
    pub fn kernel_names(&self) -> Vec<String> {
        self.shown
            .as_ref()
            .map(|d| d.diff.kernels.iter().map(|k| kernel_name(k).to_string()).collect())
            .unwrap_or_default()
    }

    /// Every kernel, then each in turn, then every kernel again.
    pub fn next_kernel(&mut self) {
        let names = self.kernel_names();
        self.kernel = match &self.kernel {
            None => names.first().cloned(),
            Some(k) => names.iter().position(|n| n == k).and_then(|i| names.get(i + 1)).cloned(),
        };
        self.scroll = 0;
        self.refilter();
    }

    /// Scrolls so the next (or previous) hunk starts near the top, with two rows of context
    /// above it. Returns false when there is none that way.
    pub fn hunk(&mut self, forward: bool) -> bool {
        const ABOVE: usize = 2;
        let at = self.scroll + ABOVE;
        let target = if forward {
            self.hunks.iter().copied().find(|h| *h > at)
        } else {
            self.hunks.iter().rev().copied().find(|h| *h < at)
        };
        match target {
            Some(h) => {
                self.scroll = h.saturating_sub(ABOVE);
                true
            }
            None => false,
        }
    }

    /// Which hunk the screen is at (1-based; 0 above the first).
    pub fn hunk_at(&self) -> usize {
        self.hunks.iter().take_while(|h| **h <= self.scroll + 2).count()
    }

    pub fn scroll_by(&mut self, down: bool, by: usize) {
        self.scroll = if down { self.scroll.saturating_add(by) } else { self.scroll.saturating_sub(by) };
        self.scroll = self.scroll.min(self.rows.len().saturating_sub(1));
    }

    /// The kernel of the row at the top of the screen.
    pub fn kernel_on_screen(&self) -> Option<&KernelDiff> {
        let d = self.shown.as_ref()?;
        let k = match self.rows.get(self.scroll)? {
            Flat::Heading(k) | Flat::Row(k, _) => *k,
        };
        d.diff.kernels.get(k)
    }

    /// The diff row of a flat row.
    /// The longest line of either listing on screen now, in characters: how far `column` goes.
    pub fn longest_text(&self) -> usize {
        self.rows
            .iter()
            .filter_map(|f| self.row(*f).and_then(|(_, r)| r))
            .flat_map(|r| [r.left.as_ref(), r.right.as_ref()])
            .flatten()
            .map(|s| s.text.chars().count())
            .max()
            .unwrap_or(0)
    }

    pub fn row(&self, flat: Flat) -> Option<(&KernelDiff, Option<&Row>)> {
        let d = self.shown.as_ref()?;
        match flat {
            Flat::Heading(k) => Some((d.diff.kernels.get(k)?, None)),
            Flat::Row(k, r) => {
                let kd = d.diff.kernels.get(k)?;
                Some((kd, Some(kd.rows.get(r)?)))
            }
        }
    }
}

/// A kernel diff's name: the selected version's kernel, else the other's.
pub fn kernel_name(k: &KernelDiff) -> &str {
    k.right.as_deref().or(k.left.as_deref()).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> DiffKey {
        DiffKey {
            kind: AsmKind::Sass,
            registers: false,
            left: None,
            right: Listing { id: id.into(), files: vec![(PathBuf::from(format!("{id}.sass")), 1, 1)] },
        }
    }

    fn loaded(k: DiffKey) -> Arc<LoadedDiff> {
        Arc::new(LoadedDiff {
            key: k,
            diff: AsmDiff { kind: AsmKind::Sass, kernels: vec![] },
            took: Duration::ZERO,
            error: None,
        })
    }

    #[test]
    fn a_diff_is_computed_once_and_then_served_from_the_cache() {
        let mut v = AsmView::default();
        assert_eq!(v.want(Ok(key("v001"))), Need::Compute(key("v001")));
        // Asked again while it is computed: not computed twice.
        assert_eq!(v.want(Ok(key("v001"))), Need::Nothing);
        assert!(v.stale());
        // The selection moves on before it arrives: it is cached, not shown.
        assert_eq!(v.want(Ok(key("v002"))), Need::Compute(key("v002")));
        v.arrived(loaded(key("v001")));
        assert!(v.shown.is_none());
        assert_eq!(v.want(Ok(key("v001"))), Need::Nothing);
        assert_eq!(v.shown.as_ref().unwrap().key, key("v001"));
        assert!(!v.stale());
        // A listing rewritten by a rebuild is another key.
        let mut rebuilt = key("v001");
        rebuilt.right.files[0].2 = 2;
        assert_eq!(v.want(Ok(rebuilt.clone())), Need::Compute(rebuilt));
        // Nothing to diff: the reason, and nothing shown.
        assert_eq!(v.want(Err("v003 does not build".into())), Need::Nothing);
        assert!(v.shown.is_none() && v.why_not.as_deref() == Some("v003 does not build"));
    }

    #[test]
    fn the_cache_keeps_the_newest_diffs() {
        let mut v = AsmView::default();
        for i in 0..CACHED + 2 {
            v.arrived(loaded(key(&format!("v{i:03}"))));
        }
        assert_eq!(v.cache.len(), CACHED);
        assert_eq!(v.want(Ok(key("v000"))), Need::Compute(key("v000")));
        assert_eq!(v.want(Ok(key(&format!("v{:03}", CACHED + 1)))), Need::Nothing);
    }
}
