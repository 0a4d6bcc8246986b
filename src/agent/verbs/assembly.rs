//! PTX and SASS listings and diffs, built on demand.

use std::fmt::Write as _;

use rung_core::asm::diff::{Row, RowKind};
use rung_core::asm::mix::InstructionMix;
use rung_core::asm::{self, AsmKind, Normalize};
use rung_core::check::Machine;
use rung_core::service::{self, DiffQuery, Listing, ListingError};
use rung_core::workspace::{VersionFile, Workspace};

use super::*;

/// A service error as the tool's reply: `field` is the argument the version came from.
fn listing_error(e: ListingError, field: &str) -> ToolError {
    let help = e.help();
    match e {
        ListingError::Build { ref diagnostics, .. } => {
            let mut text = String::new();
            for d in diagnostics.iter().take(TEXT_DIAGNOSTICS) {
                let _ = writeln!(text, "{d}");
            }
            ToolError::new(
                Some(field),
                e.to_string(),
                format!("{text}{help}; submit the fix as a new version (get_results shows every diagnostic)"),
            )
        }
        ListingError::NoKernel { .. } => ToolError::new(Some("kernel"), format!("kernel: {e}"), help),
        ListingError::Missing { .. } => ToolError::new(Some(field), e.to_string(), help),
        _ => ToolError::new(None, e.to_string(), help),
    }
}

/// The parsed listing of `v`, built first when needed (on the engine's machine and workers).
pub(super) fn listing(
    ctx: &Context,
    ws: &Workspace,
    v: &VersionFile,
    kind: AsmKind,
    kernel: Option<&str>,
    field: &str,
) -> Result<Listing, ToolError> {
    let mut store = open_store(ws)?;
    let mut engine = ctx.engine();
    let Engine { machine, runners } = &mut *engine;
    let machine = machine.get_or_insert_with(Machine::discover);
    let l = service::listing(ws, &mut store, v, kind, machine, runners).map_err(|e| listing_error(e, field))?;
    match kernel {
        Some(k) => l.only(k).map_err(|e| listing_error(e, field)),
        None => Ok(l),
    }
}

/// One line per class and per memory or tensor-core mnemonic, most frequent first.
pub(super) fn mix_text(m: &InstructionMix) -> String {
    let mut classes: Vec<(&String, &usize)> = m.classes.iter().collect();
    classes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let mut text = format!("{} instructions: ", m.instructions);
    text.push_str(&classes.iter().map(|(k, n)| format!("{k} {n}")).collect::<Vec<_>>().join(", "));
    for (what, map) in [("memory", &m.memory), ("tensor core", &m.tensor)] {
        if !map.is_empty() {
            let _ = write!(
                text,
                "\n  {what}: {}",
                map.iter().map(|(k, n)| format!("{k} ×{n}")).collect::<Vec<_>>().join(", ")
            );
        }
    }
    text
}

pub fn get_asm(ctx: &Context, args: &AsmArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let v = find_version(&ws, "version", &args.version)?.clone();
    let kind = args.kind.unwrap_or(AsmKind::Sass);
    let Listing { kernels, files, built_now, .. } = listing(ctx, &ws, &v, kind, args.kernel.as_deref(), "version")?;
    let mut budget = args.max_lines.unwrap_or(DEFAULT_ASM_LINES);
    let mut truncated = false;
    let mut out_kernels = Vec::new();
    for k in &kernels {
        let take = k.lines.len().min(budget);
        budget -= take;
        truncated |= take < k.lines.len();
        out_kernels.push(KernelAsm {
            name: k.name.clone(),
            mix: asm::mix::mix(kind, k),
            lines_total: k.lines.len(),
            lines: k.lines[..take]
                .iter()
                .map(|l| AsmLineOut { text: l.text.clone(), source_line: l.source_line })
                .collect(),
        });
    }
    let out = AsmOut { version: v.id.clone(), kind, built_now, files, kernels: out_kernels, truncated };
    let mut text = format!(
        "{} {}, {} ({} kernel{}{})\n",
        out.version,
        kind.label(),
        if built_now { "built now" } else { "from its last build" },
        out.kernels.len(),
        if out.kernels.len() == 1 { "" } else { "s" },
        if truncated { "; truncated: pass max_lines or kernel for more" } else { "" }
    );
    for k in &out.kernels {
        let _ = writeln!(text, "━━ {}: {}", k.name, mix_text(&k.mix));
        let mut last_source = None;
        for l in &k.lines {
            if l.source_line.is_some() && l.source_line != last_source {
                let _ = writeln!(text, "{}  // line {}", l.text, l.source_line.unwrap_or(0));
                last_source = l.source_line;
            } else {
                let _ = writeln!(text, "{}", l.text);
            }
        }
        if k.lines.len() < k.lines_total {
            let _ = writeln!(text, "… {} more lines", k.lines_total - k.lines.len());
        }
    }
    Reply::new(text, &out)
}

/// A run of changed rows in unified layout: what left, then what came.
pub(super) fn flush_unified(text: &mut String, pending: &mut Vec<&Row>) {
    for s in pending.iter().filter_map(|r| r.left.as_ref()) {
        let _ = writeln!(text, "- {}", s.text);
    }
    for s in pending.iter().filter_map(|r| r.right.as_ref()) {
        let _ = writeln!(text, "+ {}", s.text);
    }
    pending.clear();
}

pub fn diff_asm(ctx: &Context, args: &DiffAsmArgs) -> Result<Reply, ToolError> {
    let ws = ctx.workspace()?;
    let a = find_version(&ws, "a", &args.a)?.clone();
    let b = find_version(&ws, "b", &args.b)?.clone();
    let kind = args.kind.unwrap_or(AsmKind::Sass);
    let mut store = open_store(&ws)?;
    let q =
        DiffQuery { a: &a, b: &b, kind, kernel: args.kernel.as_deref(), norm: Normalize { registers: args.registers } };
    let cmp = {
        let mut engine = ctx.engine();
        let Engine { machine, runners } = &mut *engine;
        let machine = machine.get_or_insert_with(Machine::discover);
        service::diff(&ws, &mut store, &q, machine, runners).map_err(|e| {
            // The argument at fault: the version whose listing could not be had.
            let field = match &e {
                ListingError::Build { id, .. } | ListingError::Missing { id, .. } if *id == b.id => "b",
                _ => "a",
            };
            listing_error(e, field)
        })?
    };
    let (built_a, built_b, d) = (cmp.a.built_now, cmp.b.built_now, cmp.diff);
    let mut budget = args.max_rows.unwrap_or(DEFAULT_DIFF_ROWS);
    let mut truncated = false;
    let mut kernels = Vec::new();
    for k in &d.kernels {
        let mut hunks = Vec::new();
        for &(s, e) in &k.hunks {
            if budget == 0 {
                truncated = true;
                break;
            }
            let end = e.min(s + budget);
            truncated |= end < e;
            budget -= end - s;
            let first = |f: fn(&Row) -> Option<&rung_core::asm::diff::Side>| {
                k.rows[s..e].iter().find_map(|r| f(r).map(|x| x.line + 1)).unwrap_or(0)
            };
            hunks.push(Hunk {
                left_line: first(|r| r.left.as_ref()),
                right_line: first(|r| r.right.as_ref()),
                block: k.rows[s].block.clone(),
                rows: k.rows[s..end].to_vec(),
            });
        }
        let changes = match (&k.left_mix, &k.right_mix) {
            (Some(l), Some(r)) => asm::mix::changes(l, r),
            _ => vec![],
        };
        kernels.push(KernelChange {
            left: k.left.clone(),
            right: k.right.clone(),
            deleted: k.deleted,
            inserted: k.inserted,
            left_mix: k.left_mix.clone(),
            right_mix: k.right_mix.clone(),
            mix_changes: changes,
            hunks,
        });
    }
    let built_now: Vec<String> =
        [(built_a, &a.id), (built_b, &b.id)].into_iter().filter(|(b, _)| *b).map(|(_, id)| id.clone()).collect();
    let out =
        DiffAsmOut { a: a.id.clone(), b: b.id.clone(), kind, registers: args.registers, built_now, kernels, truncated };
    let mut text = format!(
        "{} diff {} → {} ({} kernel{}{}{})\n",
        kind.label(),
        out.a,
        out.b,
        out.kernels.len(),
        if out.kernels.len() == 1 { "" } else { "s" },
        if out.registers { ", registers renamed" } else { "" },
        if truncated { "; truncated: pass max_rows or kernel for more" } else { "" }
    );
    for k in &out.kernels {
        let name = match (&k.left, &k.right) {
            (Some(l), Some(r)) if l == r => l.clone(),
            (Some(l), Some(r)) => format!("{l} → {r}"),
            (Some(l), None) => format!("{l} (only in {})", out.a),
            (None, Some(r)) => format!("{r} (only in {})", out.b),
            (None, None) => continue,
        };
        let _ = writeln!(text, "━━ {name}: −{} +{} lines", k.deleted, k.inserted);
        if k.mix_changes.is_empty() {
            let _ = writeln!(text, "instruction mix: unchanged");
        } else {
            let _ = writeln!(text, "instruction mix ({} → {}):", out.a, out.b);
            for c in &k.mix_changes {
                let _ = writeln!(text, "  {:<32} {:>6} → {:<6} {:+}", c.what, c.a, c.b, c.b as i64 - c.a as i64);
            }
        }
        if k.hunks.is_empty() {
            let _ = writeln!(text, "(no differences)");
        }
        for h in &k.hunks {
            let block = h.block.as_ref().map(|b| format!(" in {b}")).unwrap_or_default();
            let _ = writeln!(text, "@@ {}:{} {}:{}{block} @@", out.a, h.left_line, out.b, h.right_line);
            let mut pending: Vec<&Row> = Vec::new();
            for r in &h.rows {
                if r.kind == RowKind::Equal {
                    flush_unified(&mut text, &mut pending);
                    let _ = writeln!(text, "  {}", r.left.as_ref().map_or("", |s| s.text.as_str()));
                } else {
                    pending.push(r);
                }
            }
            flush_unified(&mut text, &mut pending);
        }
    }
    Reply::new(text, &out)
}
