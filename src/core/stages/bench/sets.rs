//! A benchmark size's input sets (drawn once and kept, read-only to the workers) and the
//! outputs the workers fill with the poison.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::inputs;
use crate::model::protocol;
use crate::model::report::Verdict;
use crate::spec::{SizeSet, Spec};
use crate::stages::{Files, StageOutcome};

use super::*;

/// The input sets of one benchmark size: set 0 in `files` with the outputs' poisoned files, the
/// others timed as parameter name → file; `kept` is the folder they are kept in across the
/// check's versions (the reference's outputs go there too).
pub struct Sets {
    pub files: Files,
    pub extra: Vec<BTreeMap<String, PathBuf>>,
    /// The fresh set ([`FRESH_SET`]), by parameter name: never timed, it is copied into the
    /// re-checked set's buffers before the re-checked call, whose outputs are compared with the
    /// reference's on it.
    pub fresh: BTreeMap<String, PathBuf>,
    pub kept: PathBuf,
    /// The kept input files, which the workers only read (and the native worker holds).
    pub read_only: Vec<PathBuf>,
    /// Set 0's poisoned outputs, filled by the worker rather than written here.
    pub filled: BTreeMap<PathBuf, protocol::Fill>,
    /// Whether the input sets were drawn for this bench (not kept from an earlier one).
    pub drawn: bool,
}

/// The index of the fresh set among the drawn ones: after the timed sets.
pub const FRESH_SET: usize = INPUT_SETS;

/// The bench phase that drew the input sets (`inputs` when they were kept from an earlier bench).
pub const PHASE_DRAWN: &str = "inputs_drawn";

/// `first` with where its buffers come from: the kept files it only reads, and the outputs it
/// fills.
pub(super) fn sourced(
    mut first: protocol::Bench,
    read_only: &[PathBuf],
    filled: &BTreeMap<PathBuf, protocol::Fill>,
) -> protocol::Bench {
    first.read_only = read_only.to_vec();
    first.filled = filled.clone();
    first
}

/// The input sets of one size, drawn once per (problem, seed, size) while the runners live and
/// drawn again when a kept file changed; the outputs are poisoned afresh in `dir` for each bench.
pub(super) fn kept_sets(cx: &mut BenchCtx, sizes: &SizeSet, dir: &std::path::Path) -> Result<Sets, Box<StageOutcome>> {
    let folder = kept_folder(cx.ws, &cx.runners.env.data, cx.seed, sizes);
    let io =
        |d: &std::path::Path, e: std::io::Error| Box::new(fail(Verdict::Error, None, format!("{}: {e}", d.display())));
    let drawn = keep_inputs(cx, sizes, &folder)?;
    let (mut files, extra) = input_files(cx.spec, sizes, &folder);
    let fresh = set_paths(cx.spec, &folder, FRESH_SET);
    // Every set's inputs are the kept files, which the workers only read (a write-back leaves
    // them): they stay as drawn for the reference and the next version.
    let read_only = input_paths(cx.spec, &folder);
    let (outputs, filled) = filled_outputs(cx.spec, sizes, dir).map_err(|e| io(dir, e))?;
    files.extend(outputs);
    Ok(Sets { files, extra, fresh, kept: folder, read_only, filled, drawn })
}

/// The folder one benchmark size's input sets are kept in, for a problem and seed.
fn kept_folder(ws: &Workspace, data: &std::path::Path, seed: u64, sizes: &SizeSet) -> PathBuf {
    let key = crate::store::sha256_hex(format!("{}\n{seed}\n{sizes:?}", ws.problem_hash()).as_bytes());
    data.join("kept").join(&key[..16])
}

/// Starts drawing the first benchmark size's input sets on a thread of their own, as a check
/// that will bench begins: they are gigabytes at a real size, drawn while the first versions
/// build and run rather than in the first bench. The bench waits for them; nothing is timed
/// while they are drawn. Nothing when they are kept already or a drawing is under way. Returns
/// the size, its folder, and what gets every input file with its stamp once they are drawn whole.
pub(super) fn draw_inputs_ahead(
    ws: &Workspace,
    spec: &Spec,
    runners: &mut crate::runners::Runners,
    seed: u64,
) -> Option<(SizeSet, PathBuf, std::sync::mpsc::Receiver<crate::kept::Stamped>)> {
    let sizes = bench_sizes(spec).into_iter().next()?;
    let folder = kept_folder(ws, &runners.env.data, seed, &sizes);
    if runners.kept.knows(&input_paths(spec, &folder)) || runners.kept.writing_ahead() {
        return None;
    }
    if spec.too_big(&sizes, crate::gpu::available_memory()).is_some() {
        return None; // the bench names it
    }
    let (owned, dir, draw) = (spec.clone(), folder.clone(), sizes.clone());
    let drawn = runners.kept.write_ahead(folder.clone(), input_paths(spec, &folder), None, move || {
        write_inputs(&owned, &draw, seed, &dir, FRESH_SET + 1).map_err(|f| std::io::Error::other(f.summary))
    });
    Some((sizes, folder, drawn))
}

/// Poisoned outputs in `dir` that the worker fills: their files are written only by a write-back.
pub(super) fn filled_outputs(
    spec: &Spec,
    sizes: &SizeSet,
    dir: &std::path::Path,
) -> std::io::Result<(Files, BTreeMap<PathBuf, protocol::Fill>)> {
    std::fs::create_dir_all(dir)?;
    let mut files = Files::new();
    let mut filled = BTreeMap::new();
    for t in &spec.outputs {
        let shape = spec.shape_at(t, sizes).unwrap_or_default();
        let bytes = shape.iter().product::<i64>() as u64 * t.dtype.size_bytes() as u64;
        let path = dir.join(format!("{}.bin", t.name));
        let _ = std::fs::remove_file(&path);
        filled.insert(path.clone(), protocol::Fill { bytes, value: inputs::POISON[0] });
        files.insert(t.name.clone(), (path, shape));
    }
    Ok((files, filled))
}

/// The fresh set's inputs as drawn, for the reference: the kept files, drawn again when
/// anything changed them.
pub(super) fn pristine_inputs(cx: &mut BenchCtx, sizes: &SizeSet, sets: &Sets) -> Result<Files, Box<StageOutcome>> {
    keep_inputs(cx, sizes, &sets.kept)?;
    Ok(set_files(cx.spec, sizes, &sets.kept, FRESH_SET))
}

/// Every input set of one size in `folder`, as drawn: the kept files while intact, drawn again
/// (over whatever changed them) and kept otherwise. Whether they were drawn.
pub(super) fn keep_inputs(
    cx: &mut BenchCtx,
    sizes: &SizeSet,
    folder: &std::path::Path,
) -> Result<bool, Box<StageOutcome>> {
    let paths = input_paths(cx.spec, folder);
    if cx.runners.kept.join_ahead(&paths) {
        return Ok(true);
    }
    if cx.runners.kept.intact(&paths) {
        return Ok(false);
    }
    write_inputs(cx.spec, sizes, cx.seed, folder, FRESH_SET + 1)?;
    cx.runners
        .kept
        .keep(folder, &paths)
        .map_err(|e| Box::new(fail(Verdict::Error, None, format!("{}: {e}", folder.display()))))?;
    Ok(true)
}

/// Set `k`'s file for input `name` in `dir`.
pub(super) fn input_path(dir: &std::path::Path, name: &str, k: usize) -> PathBuf {
    dir.join(format!("{name}-{k}.bin"))
}

/// Every input set's files in `dir`, the fresh set's among them.
pub(super) fn input_paths(spec: &Spec, dir: &std::path::Path) -> Vec<PathBuf> {
    spec.inputs.iter().flat_map(|t| (0..=FRESH_SET).map(|k| input_path(dir, &t.name, k))).collect()
}

/// Set `k`'s inputs with their shapes, in `dir`.
pub(super) fn set_files(spec: &Spec, sizes: &SizeSet, dir: &std::path::Path, k: usize) -> Files {
    let shaped =
        |t: &crate::spec::TensorSpec| (input_path(dir, &t.name, k), spec.shape_at(t, sizes).unwrap_or_default());
    spec.inputs.iter().map(|t| (t.name.clone(), shaped(t))).collect()
}

/// Set 0's inputs with their shapes, and the other sets by name, in `dir`.
pub(super) fn input_files(
    spec: &Spec,
    sizes: &SizeSet,
    dir: &std::path::Path,
) -> (Files, Vec<BTreeMap<String, PathBuf>>) {
    let extra = (1..INPUT_SETS).map(|k| set_paths(spec, dir, k)).collect();
    (set_files(spec, sizes, dir, 0), extra)
}

/// Set `k`'s files in `dir` by parameter name, as a worker is given a set.
fn set_paths(spec: &Spec, dir: &std::path::Path, k: usize) -> BTreeMap<String, PathBuf> {
    spec.inputs.iter().map(|t| (t.name.clone(), input_path(dir, &t.name, k))).collect()
}

/// Draws input sets 0 to `sets - 1` of one size into `dir` (set 0 from `seed`, the others from
/// seeds of their own).
pub(super) fn write_inputs(
    spec: &Spec,
    sizes: &SizeSet,
    seed: u64,
    dir: &std::path::Path,
    sets: usize,
) -> Result<(), Box<StageOutcome>> {
    let io = |e: std::io::Error| Box::new(fail(Verdict::Error, None, format!("{}: {e}", dir.display())));
    // A benchmark size past this machine's memory is named, not an allocation that aborts.
    if let Some(why) = spec.too_big(sizes, crate::gpu::available_memory()) {
        return Err(Box::new(fail(Verdict::Error, None, format!("{why}: lower [sizes] bench in rung.toml"))));
    }
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut draws = Vec::new();
    for k in 0..sets {
        let s = if k == 0 { seed } else { seed.wrapping_add(0xB5E7_0000 + k as u64) };
        draws.extend(set_draws(spec, sizes, s, dir, k));
    }
    draw_files(&draws).map_err(io)
}

/// Draws input set `k` of one size from `seed` into `dir`: its files by parameter name.
pub(super) fn write_set(
    spec: &Spec,
    sizes: &SizeSet,
    seed: u64,
    dir: &std::path::Path,
    k: usize,
) -> std::io::Result<BTreeMap<String, PathBuf>> {
    std::fs::create_dir_all(dir)?;
    draw_files(&set_draws(spec, sizes, seed, dir, k))?;
    Ok(set_paths(spec, dir, k))
}

/// One input file to draw: input number `stream` of a set, at `seed`.
struct Draw<'a> {
    path: PathBuf,
    dtype: crate::dtype::DType,
    init: &'a crate::spec::Init,
    seed: u64,
    stream: u64,
    numel: usize,
}

/// Set `k`'s input files in `dir`, to draw from `seed`.
fn set_draws<'a>(spec: &'a Spec, sizes: &SizeSet, seed: u64, dir: &std::path::Path, k: usize) -> Vec<Draw<'a>> {
    let numel = |t: &crate::spec::TensorSpec| spec.shape_at(t, sizes).unwrap_or_default().iter().product::<i64>();
    let draw = |(idx, t): (usize, &'a crate::spec::TensorSpec)| Draw {
        path: input_path(dir, &t.name, k),
        dtype: t.dtype,
        init: &t.init,
        seed,
        stream: idx as u64,
        numel: numel(t).max(0) as usize,
    };
    spec.inputs.iter().enumerate().map(draw).collect()
}

/// Elements in one part of a drawn file: 4 MiB of f32.
const DRAW_PART: usize = 1 << 20;

/// Draws every file in `draws`, each created fresh (never through a link left at its path) at its
/// full length and mapped, the parts of all of them shared among every core: a benchmark size's
/// sets are gigabytes, and drawing them into memory, one file after another, and then writing
/// them took seconds of the first version's bench.
fn draw_files(draws: &[Draw]) -> std::io::Result<()> {
    let mut maps = Vec::new();
    for d in draws {
        let f = crate::kept::fresh(&d.path)?;
        let bytes = d.numel * d.dtype.size_bytes();
        f.set_len(bytes as u64)?;
        // An empty file has nothing to draw (and cannot be mapped).
        if bytes > 0 {
            // SAFETY: a file just created by this process, mapped until the parts are drawn.
            maps.push((d, unsafe { memmap2::MmapMut::map_mut(&f)? }));
        }
    }
    let mut parts = Vec::new();
    for (d, map) in maps.iter_mut() {
        let step = DRAW_PART * d.dtype.size_bytes();
        parts.extend(map.chunks_mut(step).enumerate().map(|(j, out)| (&**d, j * DRAW_PART, out)));
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(32).min(parts.len()).max(1);
    let mut lanes: Vec<Vec<_>> = (0..threads).map(|_| Vec::new()).collect();
    for (j, part) in parts.into_iter().enumerate() {
        lanes[j % threads].push(part);
    }
    std::thread::scope(|scope| {
        for lane in lanes {
            scope.spawn(move || {
                for (d, start, out) in lane {
                    inputs::generate_into(d.dtype, d.init, d.seed, d.stream, start, out);
                }
            });
        }
    });
    Ok(())
}

/// The real input set of one size (set 0, as the bench draws it) and poisoned outputs, in `dir`:
/// what a single traced or profiled call runs on.
pub fn draw_inputs(spec: &Spec, sizes: &SizeSet, seed: u64, dir: &std::path::Path) -> Result<Files, Box<StageOutcome>> {
    write_inputs(spec, sizes, seed, dir, 1)?;
    let outputs = poisoned_outputs(spec, sizes, dir)
        .map_err(|e| Box::new(fail(Verdict::Error, None, format!("{}: {e}", dir.display()))))?;
    let mut files = set_files(spec, sizes, dir, 0);
    files.extend(outputs);
    Ok(files)
}

/// Poisoned output files in `dir`, written: [`filled_outputs`] for a call that reads them.
pub(super) fn poisoned_outputs(spec: &Spec, sizes: &SizeSet, dir: &std::path::Path) -> std::io::Result<Files> {
    let (files, filled) = filled_outputs(spec, sizes, dir)?;
    for (path, f) in &filled {
        crate::kept::write_fresh(path, &vec![f.value; f.bytes as usize])?;
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worker fills a bench's outputs (nothing written, a planted link removed); a traced
    /// or profiled call reads them from files of the poison byte.
    #[test]
    fn outputs_are_filled_by_the_worker_or_written_poisoned_for_a_single_call() {
        let tmp = tempfile::tempdir().unwrap();
        let toml = include_str!("../../../../assets/templates/vector-add/rung.toml");
        let spec = Spec::parse(toml, std::path::Path::new("rung.toml")).unwrap();
        let sizes = spec.test_sizes[0].clone();
        let out = &spec.outputs[0];
        let bytes = spec.shape_at(out, &sizes).unwrap().iter().product::<i64>() as u64 * out.dtype.size_bytes() as u64;
        let filled_dir = tmp.path().join("filled");
        std::fs::create_dir_all(&filled_dir).unwrap();
        let planted = filled_dir.join(format!("{}.bin", out.name));
        std::os::unix::fs::symlink(tmp.path().join("victim"), &planted).unwrap();
        let (files, filled) = filled_outputs(&spec, &sizes, &filled_dir).unwrap();
        assert_eq!(files[&out.name].0, planted);
        assert_eq!(filled[&planted], protocol::Fill { bytes, value: inputs::POISON[0] });
        assert!(std::fs::symlink_metadata(&planted).is_err(), "nothing stands there for the write-back");
        let written = poisoned_outputs(&spec, &sizes, &tmp.path().join("written")).unwrap();
        let data = std::fs::read(&written[&out.name].0).unwrap();
        assert_eq!(data.len() as u64, bytes);
        assert!(data.iter().all(|b| *b == inputs::POISON[0]));
    }

    /// Files drawn in parts on every core hold the bytes drawn in order, for a file of several
    /// parts with a short last one, a small one and an empty one, whatever stood at their paths.
    #[test]
    fn drawn_files_hold_the_bytes_drawn_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let normal = crate::spec::Init::Normal { mean: 0.0, std: 1.0 };
        let uniform = crate::spec::Init::Uniform { low: -2.0, high: 3.0 };
        let draw = |name: &str, dtype, init, stream, numel| Draw {
            path: tmp.path().join(name),
            dtype,
            init,
            seed: 11,
            stream,
            numel,
        };
        let draws = [
            draw("big.bin", crate::dtype::DType::F32, &normal, 0, 2 * DRAW_PART + 7),
            draw("small.bin", crate::dtype::DType::Bf16, &uniform, 1, 33),
            draw("empty.bin", crate::dtype::DType::F32, &normal, 2, 0),
        ];
        std::fs::write(&draws[1].path, b"stale").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("victim"), &draws[0].path).unwrap();
        draw_files(&draws).unwrap();
        for d in &draws {
            let expected = inputs::generate(d.dtype, d.init, d.seed, d.stream, d.numel);
            assert!(std::fs::read(&d.path).unwrap() == expected, "{} differs", d.path.display());
        }
        assert!(!tmp.path().join("victim").exists(), "a planted link is replaced, not followed");
    }

    /// The worker is given the timed sets and the fresh one from the files the reference reads,
    /// and every set differs, so a version right on the sets it was timed on is not right on the
    /// fresh one by remembering them; the fresh set is kept (and checked) with the others.
    #[test]
    fn the_fresh_set_is_drawn_kept_and_unlike_the_timed_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let toml = include_str!("../../../../assets/templates/vector-add/rung.toml");
        let spec = Spec::parse(toml, std::path::Path::new("rung.toml")).unwrap();
        let sizes = spec.test_sizes[0].clone();
        write_inputs(&spec, &sizes, 7, tmp.path(), FRESH_SET + 1).unwrap();
        let (set0, extra) = input_files(&spec, &sizes, tmp.path());
        assert_eq!(extra.len(), INPUT_SETS - 1);
        assert_eq!(set_files(&spec, &sizes, tmp.path(), 0), set0);
        let kept = input_paths(&spec, tmp.path());
        let mut seen = std::collections::BTreeSet::new();
        for k in 0..=FRESH_SET {
            let files = set_files(&spec, &sizes, tmp.path(), k);
            for t in &spec.inputs {
                let (path, shape) = &files[&t.name];
                assert_eq!(shape, &set0[&t.name].1, "every set has set 0's shapes");
                if (1..INPUT_SETS).contains(&k) {
                    assert_eq!(path, &extra[k - 1][&t.name], "set {k}'s `{}` is the worker's", t.name);
                }
                assert!(kept.contains(path), "set {k}'s `{}` is kept", t.name);
                assert!(seen.insert(std::fs::read(path).unwrap()), "set {k}'s `{}` repeats another set", t.name);
            }
        }
        // Drawn per bench: every set comes up.
        let drawn: std::collections::BTreeSet<usize> = (0..300).map(|_| series::recheck_set()).collect();
        assert_eq!(drawn, (0..INPUT_SETS).collect());
    }
}
