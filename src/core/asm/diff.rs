//! Side-by-side diffs of two versions' PTX or SASS, kernel by kernel.
//!
//! Lines are normalised ([`super::normalized_lines`]), interned to integers and diffed with
//! `similar`'s Myers (after its preflight, which sets aside lines that occur on one side only,
//! as xdiff does: the result is a minimal edit script, not a heuristic one). The ops become
//! aligned rows (left, right, kind), hunks to jump between, and for changed rows the spans that
//! differ within the line.

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use similar::{Algorithm, DiffOp, capture_diff_slices};

use super::mix::{InstructionMix, mix};
use super::{AsmKind, KernelListing, Normalize, normalized_lines};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RowKind {
    Equal,
    /// Only on the left.
    Delete,
    /// Only on the right.
    Insert,
    /// Changed: both sides, paired.
    Replace,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Side {
    /// Index of the line in the kernel's listing.
    pub line: usize,
    pub text: String,
    pub source_line: Option<u32>,
    /// Byte ranges of `text` that differ from the other side (Replace rows only).
    pub changed: Vec<(usize, usize)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    pub kind: RowKind,
    pub left: Option<Side>,
    pub right: Option<Side>,
    /// The label of the block this row is in (normalised), for per-label navigation.
    pub block: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KernelDiff {
    pub left: Option<String>,
    pub right: Option<String>,
    pub rows: Vec<Row>,
    /// Row ranges `[start, end)` of each run of changes.
    pub hunks: Vec<(usize, usize)>,
    pub deleted: usize,
    pub inserted: usize,
    pub left_mix: Option<InstructionMix>,
    pub right_mix: Option<InstructionMix>,
}

impl KernelDiff {
    /// Lines deleted plus lines inserted: the edit script's size.
    pub fn edit_size(&self) -> usize {
        self.deleted + self.inserted
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AsmDiff {
    pub kind: AsmKind,
    pub kernels: Vec<KernelDiff>,
}

impl AsmDiff {
    pub fn edit_size(&self) -> usize {
        self.kernels.iter().map(KernelDiff::edit_size).sum()
    }
}

/// Pairs kernels by name; when exactly one kernel on each side is left unpaired (a renamed
/// kernel, or a Triton kernel against a CUDA one), pairs those too.
fn pair<'a>(
    left: &'a [KernelListing],
    right: &'a [KernelListing],
) -> Vec<(Option<&'a KernelListing>, Option<&'a KernelListing>)> {
    let mut pairs = Vec::new();
    let mut used = vec![false; right.len()];
    let mut lonely_left = Vec::new();
    for l in left {
        match right.iter().position(|r| r.name == l.name) {
            Some(i) if !used[i] => {
                used[i] = true;
                pairs.push((Some(l), Some(&right[i])));
            }
            _ => lonely_left.push(l),
        }
    }
    let lonely_right: Vec<&KernelListing> = right.iter().zip(&used).filter(|(_, u)| !**u).map(|(r, _)| r).collect();
    if let ([l], [r]) = (lonely_left.as_slice(), lonely_right.as_slice()) {
        pairs.push((Some(l), Some(r)));
    } else {
        pairs.extend(lonely_left.into_iter().map(|l| (Some(l), None)));
        pairs.extend(lonely_right.into_iter().map(|r| (None, Some(r))));
    }
    pairs
}

pub fn diff(kind: AsmKind, left: &[KernelListing], right: &[KernelListing], norm: Normalize) -> AsmDiff {
    let kernels = pair(left, right).into_iter().map(|(l, r)| diff_kernel(kind, l, r, norm)).collect();
    AsmDiff { kind, kernels }
}

const CONTEXT: usize = 3;

fn diff_kernel(kind: AsmKind, l: Option<&KernelListing>, r: Option<&KernelListing>, norm: Normalize) -> KernelDiff {
    let empty = KernelListing { name: String::new(), lines: Vec::new() };
    let (lk, rk) = (l.unwrap_or(&empty), r.unwrap_or(&empty));
    let lt = normalized_lines(kind, lk, norm);
    let rt = normalized_lines(kind, rk, norm);
    // Intern: equal text, equal id.
    let mut ids: HashMap<&str, u32> = HashMap::with_capacity(lt.len() + rt.len());
    let mut la: Vec<u32> = Vec::with_capacity(lt.len());
    let mut ra: Vec<u32> = Vec::with_capacity(rt.len());
    for (texts, out) in [(&lt, &mut la), (&rt, &mut ra)] {
        for s in texts.iter() {
            let next = ids.len() as u32;
            out.push(*ids.entry(s.as_str()).or_insert(next));
        }
    }
    let ops = capture_diff_slices(Algorithm::Myers, &la, &ra);

    let side = |k: &KernelListing, texts: &[String], i: usize| Side {
        line: i,
        text: texts[i].clone(),
        source_line: k.lines[i].source_line,
        changed: Vec::new(),
    };
    let mut rows: Vec<Row> = Vec::new();
    let (mut deleted, mut inserted) = (0, 0);
    for op in ops {
        match op {
            DiffOp::Equal { old_index, new_index, len } => {
                for j in 0..len {
                    rows.push(Row {
                        kind: RowKind::Equal,
                        left: Some(side(lk, &lt, old_index + j)),
                        right: Some(side(rk, &rt, new_index + j)),
                        block: None,
                    });
                }
            }
            DiffOp::Delete { old_index, old_len, .. } => {
                deleted += old_len;
                for j in 0..old_len {
                    rows.push(Row {
                        kind: RowKind::Delete,
                        left: Some(side(lk, &lt, old_index + j)),
                        right: None,
                        block: None,
                    });
                }
            }
            DiffOp::Insert { new_index, new_len, .. } => {
                inserted += new_len;
                for j in 0..new_len {
                    rows.push(Row {
                        kind: RowKind::Insert,
                        left: None,
                        right: Some(side(rk, &rt, new_index + j)),
                        block: None,
                    });
                }
            }
            DiffOp::Replace { old_index, old_len, new_index, new_len } => {
                deleted += old_len;
                inserted += new_len;
                let pairs = pair_by_opcode(&lt[old_index..old_index + old_len], &rt[new_index..new_index + new_len]);
                for (a, b) in pairs {
                    let mut left = a.map(|j| side(lk, &lt, old_index + j));
                    let mut right = b.map(|j| side(rk, &rt, new_index + j));
                    let kind = match (&left, &right) {
                        (Some(_), Some(_)) => RowKind::Replace,
                        (Some(_), None) => RowKind::Delete,
                        _ => RowKind::Insert,
                    };
                    if let (Some(a), Some(b)) = (left.as_mut(), right.as_mut()) {
                        let (ca, cb) = inline_changes(&a.text, &b.text);
                        a.changed = ca;
                        b.changed = cb;
                    }
                    rows.push(Row { kind, left, right, block: None });
                }
            }
        }
    }
    // Blocks: the latest label seen on either side.
    let mut block: Option<String> = None;
    for row in &mut rows {
        for s in [&row.left, &row.right].into_iter().flatten() {
            if let Some(label) = s.text.strip_suffix(':').filter(|t| !t.contains(' ')) {
                block = Some(label.to_string());
            }
        }
        row.block = block.clone();
    }
    let hunks = hunks(&rows);
    KernelDiff {
        left: l.map(|k| k.name.clone()),
        right: r.map(|k| k.name.clone()),
        rows,
        hunks,
        deleted,
        inserted,
        left_mix: l.map(|k| mix(kind, k)),
        right_mix: r.map(|k| mix(kind, k)),
    }
}

/// The largest changed block whose lines are paired by opcode; a larger one is paired in order.
const PAIRING_CELLS: usize = 250_000;

/// The opcode a line starts with, without predicate or modifiers: `LDG` for `@P0 LDG.E.128 R4, ...`,
/// `ld` for `ld.global.v4.f32 ...`; a label or directive is its own text.
fn opcode(line: &str) -> &str {
    let mut words = line.split_whitespace();
    let first = match words.next() {
        Some(w) if w.starts_with('@') => words.next().unwrap_or(w),
        Some(w) => w,
        None => return "",
    };
    if first.ends_with(':') || first.starts_with('.') {
        return line;
    }
    first.split('.').next().unwrap_or(first)
}

/// Rows for a changed block: lines with the same opcode paired (the longest common subsequence of
/// opcodes), so `LDG.E` faces the `LDG.E.128` that replaced it rather than whatever line happens
/// to sit at the same offset; the rest are deletions and insertions in their places.
fn pair_by_opcode(old: &[String], new: &[String]) -> Vec<(Option<usize>, Option<usize>)> {
    let (m, n) = (old.len(), new.len());
    if m == 0 || n == 0 || m.saturating_mul(n) > PAIRING_CELLS {
        return (0..m.max(n)).map(|j| ((j < m).then_some(j), (j < n).then_some(j))).collect();
    }
    let a: Vec<&str> = old.iter().map(|l| opcode(l)).collect();
    let b: Vec<&str> = new.iter().map(|l| opcode(l)).collect();
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![0u32; (m + 1) * (n + 1)];
    let at = |i: usize, j: usize| i * (n + 1) + j;
    for i in (0..m).rev() {
        for j in (0..n).rev() {
            lcs[at(i, j)] =
                if a[i] == b[j] { lcs[at(i + 1, j + 1)] + 1 } else { lcs[at(i + 1, j)].max(lcs[at(i, j + 1)]) };
        }
    }
    let mut out = Vec::with_capacity(m.max(n));
    let (mut i, mut j) = (0, 0);
    while i < m || j < n {
        if i < m && j < n && a[i] == b[j] {
            out.push((Some(i), Some(j)));
            i += 1;
            j += 1;
        } else if j == n || (i < m && lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
            out.push((Some(i), None));
            i += 1;
        } else {
            out.push((None, Some(j)));
            j += 1;
        }
    }
    // Unpaired neighbours (a deletion right before an insertion) share a row, as a changed line.
    let mut merged: Vec<(Option<usize>, Option<usize>)> = Vec::with_capacity(out.len());
    for p in out {
        match (merged.last_mut(), p) {
            (Some(last @ (Some(_), None)), (None, Some(r))) => last.1 = Some(r),
            _ => merged.push(p),
        }
    }
    merged
}

fn hunks(rows: &[Row]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        if rows[i].kind == RowKind::Equal {
            i += 1;
            continue;
        }
        let start = i.saturating_sub(CONTEXT);
        while i < rows.len() && rows[i].kind != RowKind::Equal {
            i += 1;
        }
        let end = (i + CONTEXT).min(rows.len());
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => out.push((start, end)),
        }
    }
    out
}

/// Tokens: runs of word characters, or single other characters.
fn tokens(s: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices() {
        let word = c.is_alphanumeric() || c == '_' || c == '.';
        match (word, start) {
            (true, None) => start = Some(i),
            (false, Some(st)) => {
                out.push((st, i));
                start = None;
                out.push((i, i + c.len_utf8()));
            }
            (false, None) => out.push((i, i + c.len_utf8())),
            _ => {}
        }
    }
    if let Some(st) = start {
        out.push((st, s.len()));
    }
    out
}

/// Byte ranges `[start, end)` within a line.
pub type Spans = Vec<(usize, usize)>;

/// The byte ranges that differ between two versions of a line, token by token.
pub fn inline_changes(a: &str, b: &str) -> (Spans, Spans) {
    let ta = tokens(a);
    let tb = tokens(b);
    let sa: Vec<&str> = ta.iter().map(|&(s, e)| &a[s..e]).collect();
    let sb: Vec<&str> = tb.iter().map(|&(s, e)| &b[s..e]).collect();
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    let merge = |v: &mut Vec<(usize, usize)>, r: (usize, usize)| match v.last_mut() {
        Some(last) if last.1 == r.0 => last.1 = r.1,
        _ => v.push(r),
    };
    for op in capture_diff_slices(Algorithm::Myers, &sa, &sb) {
        let (o, ol, n, nl) = match op {
            DiffOp::Equal { .. } => continue,
            DiffOp::Delete { old_index, old_len, new_index } => (old_index, old_len, new_index, 0),
            DiffOp::Insert { old_index, new_index, new_len } => (old_index, 0, new_index, new_len),
            DiffOp::Replace { old_index, old_len, new_index, new_len } => (old_index, old_len, new_index, new_len),
        };
        if ol > 0 {
            merge(&mut ca, (ta[o].0, ta[o + ol - 1].1));
        }
        if nl > 0 {
            merge(&mut cb, (tb[n].0, tb[n + nl - 1].1));
        }
    }
    (ca, cb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_block_pairs_lines_by_opcode() {
        let old: Vec<String> = ["LDG.E R4, [R2] ;", "LDG.E R5, [R6] ;", "FADD R4, R4, R5 ;", "STG.E [R10], R4 ;"]
            .map(String::from)
            .to_vec();
        let new: Vec<String> = [
            "LDG.E.128 R4, [R2] ;",
            "LDG.E.128 R8, [R6] ;",
            "FADD R4, R4, R8 ;",
            "FADD R5, R5, R9 ;",
            "@P0 STG.E.128 [R10], R4 ;",
        ]
        .map(String::from)
        .to_vec();
        let pairs = pair_by_opcode(&old, &new);
        assert_eq!(
            pairs,
            vec![(Some(0), Some(0)), (Some(1), Some(1)), (Some(2), Some(2)), (None, Some(3)), (Some(3), Some(4))]
        );
        // Nothing in common: in order, side by side.
        let other: Vec<String> = vec!["EXIT ;".into(), "BRA `(.L0) ;".into()];
        assert_eq!(pair_by_opcode(&old[..1], &other), vec![(Some(0), Some(0)), (None, Some(1))]);
        assert_eq!(opcode("@!P1 LDG.E.128 R4, [R2] ;"), "LDG");
        assert_eq!(opcode("ld.global.v4.f32 {%f1}, [%rd1];"), "ld");
        assert_eq!(opcode(".L0:"), ".L0:");
    }
    use crate::asm::parse;

    fn sass(lines: &[&str]) -> Vec<KernelListing> {
        let mut t = String::from("Function : k\n");
        for (i, l) in lines.iter().enumerate() {
            if l.ends_with(':') {
                t.push_str(&format!("{l}\n"));
            } else {
                t.push_str(&format!("        /*{:04x}*/   {l} ;  /* 0x0000 */\n", i * 16));
            }
        }
        parse(AsmKind::Sass, &t)
    }

    #[test]
    fn rows_align_and_wider_loads_show_on_the_right_only() {
        let a = sass(&[
            "S2R R0, SR_TID.X",
            "LDG.E R2, desc[UR4][R2.64]",
            "FADD R2, R2, R2",
            "STG.E desc[UR4][R4.64], R2",
            "EXIT",
        ]);
        let b = sass(&[
            "S2R R0, SR_TID.X",
            "LDG.E.128 R4, desc[UR4][R2.64]",
            "FADD R2, R2, R2",
            "STG.E desc[UR4][R4.64], R2",
            "EXIT",
        ]);
        let d = diff(AsmKind::Sass, &a, &b, Normalize::default());
        let k = &d.kernels[0];
        assert_eq!(k.edit_size(), 2);
        let changed: Vec<&Row> = k.rows.iter().filter(|r| r.kind != RowKind::Equal).collect();
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].kind, RowKind::Replace);
        let right = changed[0].right.as_ref().unwrap();
        let spans: Vec<&str> = right.changed.iter().map(|&(s, e)| &right.text[s..e]).collect();
        assert_eq!(spans, vec!["LDG.E.128", "R4"]);
        assert_eq!(k.hunks, vec![(0, 5)]);
        assert_eq!(k.right_mix.as_ref().unwrap().memory.get("LDG 128-bit"), Some(&1));
    }

    #[test]
    fn renumbered_labels_are_not_changes() {
        let a = sass(&["@P0 BRA `(.L_x_3)", "NOP", ".L_x_3:", "EXIT"]);
        let b = sass(&["@P0 BRA `(.L_x_9)", "NOP", ".L_x_9:", "EXIT"]);
        let d = diff(AsmKind::Sass, &a, &b, Normalize::default());
        assert_eq!(d.edit_size(), 0);
        assert_eq!(d.kernels[0].rows[3].block.as_deref(), Some(".L0"));
    }

    #[test]
    fn hunks_merge_when_context_overlaps() {
        let rows: Vec<Row> = "EEDEEEEEEEEIEE"
            .chars()
            .map(|c| Row {
                kind: if c == 'E' {
                    RowKind::Equal
                } else if c == 'D' {
                    RowKind::Delete
                } else {
                    RowKind::Insert
                },
                left: None,
                right: None,
                block: None,
            })
            .collect();
        assert_eq!(hunks(&rows), vec![(0, 6), (8, 14)]);
    }

    #[test]
    fn unmatched_single_kernels_are_paired() {
        let mut a = sass(&["EXIT"]);
        a[0].name = "triton_kernel".into();
        let b = sass(&["EXIT"]);
        let d = diff(AsmKind::Sass, &a, &b, Normalize::default());
        assert_eq!(d.kernels.len(), 1);
        assert_eq!(d.kernels[0].left.as_deref(), Some("triton_kernel"));
    }
}
