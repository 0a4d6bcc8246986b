//! The timed outputs re-checked against the reference at the benchmark size.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::metrics;
use crate::model::protocol::{self, CallMode, Op, TensorFile};
use crate::runners::Runners;
use crate::spec::{SizeSet, Spec};
use crate::stages::{Files, call_args};
use crate::workspace::Workspace;

use super::*;

/// Compares the written-back outputs (in `sets.files`, from the re-checked call on the fresh
/// set) with the reference's on the fresh set at the benchmark size. Unless its outputs from an
/// earlier bench of this problem are kept intact in `sets.kept`, the reference is run on the
/// fresh set as drawn ([`pristine_inputs`], read only then): a CUDA reference through `native`,
/// a Python one in a child of the zygote. `None`: they match, or there is no reference to run.
pub(super) fn recheck_timed(
    cx: &mut BenchCtx,
    native: Option<LaunchAt>,
    sizes: &SizeSet,
    sets: &Sets,
    phases: &mut BTreeMap<String, f64>,
) -> Option<String> {
    let spec = cx.spec;
    let mut clock = stats::Clock::new();
    let ref_dir = sets.kept.join("reference-fresh");
    let paths: Vec<PathBuf> = spec.outputs.iter().map(|t| reference_file(&ref_dir, &t.name)).collect();
    // Run ahead of need (as the check began), or kept from an earlier bench, or run now.
    let ahead = cx.runners.kept.join_ahead(&paths);
    if !ahead && !cx.runners.kept.intact(&paths) {
        let pristine = match pristine_inputs(cx, sizes, sets) {
            Ok(p) => p,
            Err(f) => return Some(f.summary),
        };
        if let Err(e) = std::fs::create_dir_all(&ref_dir) {
            return Some(format!("{}: {e}", ref_dir.display()));
        }
        // The reference writes these: whatever stands there (a link a version left) goes first.
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
        let ran = match native {
            Some(launch_at) => run_native(spec, cx.runners, launch_at, sizes, &pristine, &ref_dir),
            None => run_python(cx.ws, spec, cx.runners, sizes, &pristine, &ref_dir)?,
        };
        if let Err(why) = ran {
            return Some(why.0);
        }
        // Kept only after it ran whole; a failure to keep costs the next version a rerun.
        let _ = cx.runners.kept.keep(&sets.kept, &paths);
    }
    clock.lap("recheck_reference");
    let differ = outputs_differ(spec, &sets.files, |name| reference_file(&ref_dir, name), &mut clock);
    stats::add_phases(phases, &clock.phases);
    differ
}

/// Why the reference did not run at the benchmark size (the bench's re-check reason).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ReferenceFailed(String);

fn reference_file(dir: &std::path::Path, output: &str) -> PathBuf {
    dir.join(format!("{output}-ref.bin"))
}

/// Runs a Python reference on set 0 into `dir`; `None` when the reference is not Python (its
/// format re-checks elsewhere).
fn run_python(
    ws: &Workspace,
    spec: &Spec,
    runners: &mut Runners,
    sizes: &SizeSet,
    files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    dir: &std::path::Path,
) -> Option<Result<(), ReferenceFailed>> {
    let reference = ws.reference.clone().filter(|r| r.extension().is_some_and(|e| e == "py"))?;
    Some(run_python_reference(spec, runners, sizes, files, dir, (&ws.root, reference)))
}

/// The reference's call on the inputs in `files`, writing its outputs into `dir`.
fn reference_call(
    spec: &Spec,
    sizes: &SizeSet,
    files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    dir: &std::path::Path,
    (ws_root, reference): (&std::path::Path, PathBuf),
) -> Result<protocol::Call, ReferenceFailed> {
    let ref_source = std::fs::read_to_string(ws_root.join(&reference)).unwrap_or_default();
    let params: Vec<String> = crate::stages::prepare::python_def_params(&ref_source, "reference")
        .map(|(p, _)| p.into_iter().map(|(n, _)| n).collect())
        .unwrap_or_else(|| spec.inputs.iter().map(|t| t.name.clone()).collect());
    let mut returns = BTreeMap::new();
    for t in &spec.outputs {
        let shape = spec.shape_at(t, sizes).unwrap_or_default();
        returns.insert(t.name.clone(), TensorFile { path: reference_file(dir, &t.name), dtype: t.dtype, shape });
    }
    let args = call_args(spec, &params, sizes, |t, _| {
        let (path, shape) = &files[&t.name];
        TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() }
    })
    .map_err(|e| ReferenceFailed(format!("the reference cannot be called: {e}")))?;
    Ok(protocol::Call::reference(reference, args, returns))
}

fn run_python_reference(
    spec: &Spec,
    runners: &mut Runners,
    sizes: &SizeSet,
    files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    dir: &std::path::Path,
    reference: (&std::path::Path, PathBuf),
) -> Result<(), ReferenceFailed> {
    let call = reference_call(spec, sizes, files, dir, reference)?;
    // The reference runs in a child of its own (the version's child, if any, has ended).
    let z = runners
        .zygote(false)
        .map_err(|e| ReferenceFailed(format!("the reference could not run at the benchmark size: {e}")))?;
    if !z.fork(CallMode::Reference, Duration::from_secs(60)).is_ok_and(|r| r.ok) {
        return Err(ReferenceFailed("the reference could not run at the benchmark size".into()));
    }
    let resp = z.call(Op::Call(call), spec.limits.run * 4);
    runners.end_children();
    match resp {
        Ok(r) if r.ok => Ok(()),
        Ok(r) => {
            Err(ReferenceFailed(format!("the reference failed: {}", r.error.map(|e| e.message).unwrap_or_default())))
        }
        Err(e) => Err(ReferenceFailed(format!("the reference failed: {e}"))),
    }
}

/// Why the timed outputs in `files` are not the reference's (read from `reference(name)`), by
/// each output's tolerance; `None` when every one matches.
/// `clock` times the files' mapping (`recheck_read`: their pages, read in) apart from the
/// comparison itself (`recheck_compare`).
fn outputs_differ(
    spec: &Spec,
    files: &Files,
    reference: impl Fn(&str) -> PathBuf,
    clock: &mut stats::Clock,
) -> Option<String> {
    for t in &spec.outputs {
        let shape: Vec<usize> = files[&t.name].1.iter().map(|d| *d as usize).collect();
        let (o, r) = (mapped(&files[&t.name].0), mapped(&reference(&t.name)));
        let (o, r) = (o.as_deref().unwrap_or_default(), r.as_deref().unwrap_or_default());
        clock.lap("recheck_read");
        if o.len() != r.len() {
            return Some(format!("`{}`: {} bytes written back, the reference's {}", t.name, o.len(), r.len()));
        }
        let c = metrics::compare_bytes(t.dtype, o, r, &shape, &t.tolerance);
        clock.lap("recheck_compare");
        if let Some(why) = metrics::judge(&c, &t.tolerance) {
            return Some(format!("`{}`: {why}", t.name));
        }
    }
    None
}

/// A file's bytes mapped rather than read: the outputs and the reference's at a benchmark size
/// are hundreds of megabytes, and copying them took most of the re-check. Its pages are mapped
/// in at once (MAP_POPULATE), not a fault at a time under the comparison's threads. `None` for
/// a missing or empty file (mapped empty files are an error).
fn mapped(path: &std::path::Path) -> Option<memmap2::Mmap> {
    let f = std::fs::File::open(path).ok()?;
    // SAFETY: rung's own files in its scratch and kept folders, written before this and not
    // written while mapped: the worker's write-back has answered and the reference has run.
    unsafe { memmap2::MmapOptions::new().populate().map(&f) }.ok()
}

/// A CUDA reference, launched in the native worker on set 0, its outputs into `dir`.
fn run_native(
    spec: &Spec,
    runners: &mut Runners,
    launch_at: LaunchAt,
    sizes: &SizeSet,
    files: &Files,
    dir: &std::path::Path,
) -> Result<(), ReferenceFailed> {
    // The native worker writes every buffer back to its file: the reference gets copies of the
    // inputs, so the kept ones stay as drawn.
    let mut rfiles = Files::new();
    for (name, (path, shape)) in files {
        let copy = dir.join(format!("{name}-in.bin"));
        crate::kept::copy_fresh(path, &copy).map_err(|e| ReferenceFailed(format!("{}: {e}", copy.display())))?;
        rfiles.insert(name.clone(), (copy, shape.clone()));
    }
    for t in &spec.outputs {
        let shape = spec.shape_at(t, sizes).unwrap_or_default();
        let path = reference_file(dir, &t.name);
        let len = shape.iter().product::<i64>() as usize * t.dtype.size_bytes();
        crate::kept::write_fresh(&path, &vec![0xffu8; len])
            .map_err(|e| ReferenceFailed(format!("{}: {e}", path.display())))?;
        rfiles.insert(t.name.clone(), (path, shape));
    }
    let launch =
        launch_at(sizes, &rfiles).map_err(|m| ReferenceFailed(format!("the reference cannot be launched: {m}")))?;
    let ran = runners.launch(launch, spec.limits.run * 4);
    for name in files.keys() {
        let _ = std::fs::remove_file(&rfiles[name].0);
    }
    match ran {
        Ok(r) if r.ok => Ok(()),
        Ok(r) => {
            Err(ReferenceFailed(format!("the reference failed: {}", r.error.map(|e| e.message).unwrap_or_default())))
        }
        Err(e) => Err(ReferenceFailed(format!("the reference failed: {e}"))),
    }
}

/// What the judge learns of a problem at one benchmark ([`protocol::Judge::learn`]): what a
/// bench's timed calls poison and its re-check acts on.
pub(super) fn learn(
    runners: &mut Runners,
    judge: &protocol::Judge,
    limit: Duration,
) -> Result<protocol::JudgeHints, crate::stages::run::JudgeFailed> {
    let asked = protocol::Judge { learn: true, ..judge.clone() };
    crate::stages::run::judge_call(runners, CallMode::Cuda, asked, limit).map(|r| r.hints.unwrap_or_default())
}

/// A GPU MODE or KernelBench bench's re-check, judged in a process that never ran the version:
/// what the judge learns of the problem (`judge` carries the problem, its arguments and seed),
/// the version's two calls (set 0's buffers refilled with a fresh draw, then new buffers), and
/// the judge's verdict on them, put in `size` with the time of the version's call on fresh
/// inputs in set 0's buffers, made as a timed call is ([`problem_rechecked`]).
pub(super) fn problem_recheck(
    runners: &mut Runners,
    target: &Target,
    judge: protocol::Judge,
    learnt: Result<protocol::JudgeHints, crate::stages::run::JudgeFailed>,
    limit: Duration,
    size: &mut SizeBench,
    timed: &[protocol::Sample],
) {
    use crate::stages::run::{JudgeFailed, judge_call};
    let failed = |f: JudgeFailed| (Some(format!("the judge: {}", f.2)), f.1);
    let mut hints = match learnt {
        Ok(h) => h,
        Err(f) => return problem_rechecked(size, failed(f), None, timed),
    };
    let mut fresh = None;
    let dump = runners.scratch("rechecked");
    let mut out = (None, None);
    for attempt in 0..2 {
        let bench = protocol::Bench {
            write_back: true,
            dump: Some(dump.clone()),
            hints: Some(hints.clone()),
            ..Default::default()
        };
        let r = match send(runners, target, bench, limit) {
            Ok(r) => r,
            Err(f) => {
                out = (Some(f.summary), f.reason);
                break;
            }
        };
        stats::add_phases(&mut size.phases, &r.phases);
        fresh = fresh.or(r.recheck_sample);
        let asked = protocol::Judge { observed: r.observed, recheck: true, dump: Some(dump.clone()), ..judge.clone() };
        match judge_call(runners, CallMode::Cuda, asked, limit) {
            Ok(j) if !j.redo.is_empty() && attempt == 0 => hints.regenerable.retain(|n| !j.redo.contains(n)),
            Ok(j) => {
                stats::add_phases(&mut size.phases, &j.phases);
                out = (j.recheck, j.recheck_reason);
                break;
            }
            Err(f) => {
                out = failed(f);
                break;
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dump);
    problem_rechecked(size, out, fresh.as_ref(), timed);
}

/// Starts the reference on the fresh set of the inputs being drawn into `folder` on a thread of
/// its own, once `drawn` says they are whole, in a reference zygote of its own: it ran inside
/// the first bench (2 s of the demo's first bench, a float64 NumPy reference at 64 MB a row
/// set), and now runs while the first versions build and run. [`recheck_timed`] joins it and
/// keeps its outputs as the thread found them when it wrote them; anything that changed them
/// since (a version that ran meanwhile) shows, and the reference runs again there. For a
/// Python reference only (a CUDA one needs the native worker, which the check holds).
pub(super) fn reference_ahead(
    ws: &Workspace,
    spec: &Spec,
    runners: &mut Runners,
    sizes: &SizeSet,
    folder: &std::path::Path,
    drawn: std::sync::mpsc::Receiver<crate::kept::Stamped>,
) {
    let Some(reference) = ws.reference.clone().filter(|r| r.extension().is_some_and(|e| e == "py")) else { return };
    let ref_dir = folder.join("reference-fresh");
    let paths: Vec<PathBuf> = spec.outputs.iter().map(|t| reference_file(&ref_dir, &t.name)).collect();
    let files = super::sets::set_files(spec, sizes, folder, FRESH_SET);
    let Ok(call) = reference_call(spec, sizes, &files, &ref_dir, (&ws.root, reference)) else { return };
    let live = crate::runners::Live::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let Some(run) = runners.detached_reference(live.clone(), stop.clone()) else { return };
    let abandon = Box::new(move || {
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        crate::runners::kill_live(&live);
    });
    let (limit, written) = (spec.limits.run * 4, paths.clone());
    let fresh: Vec<PathBuf> = files.values().map(|(p, _)| p.clone()).collect();
    let _ = runners.kept.write_ahead(folder.to_path_buf(), paths, Some(abandon), move || {
        let Ok(all) = drawn.recv() else { return Err(std::io::Error::other("the inputs were not drawn")) };
        let as_drawn: crate::kept::Stamped = all.into_iter().filter(|(p, _)| fresh.contains(p)).collect();
        std::fs::create_dir_all(&ref_dir)?;
        // The reference writes these: whatever stands there (a link a version left) goes first.
        for p in &written {
            let _ = std::fs::remove_file(p);
        }
        match run(call, limit) {
            Ok(r) if r.ok => {}
            Ok(r) => return Err(std::io::Error::other(r.error.map(|e| e.message).unwrap_or_default())),
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        }
        // Versions run meanwhile, and the data folder is within their reach: outputs of inputs
        // that changed since they were drawn (even if put back) are not the reference's on
        // them, and the bench runs it again.
        if as_drawn.len() != fresh.len() || !crate::kept::unchanged(&as_drawn) {
            return Err(std::io::Error::other("the fresh set changed while the reference ran on it"));
        }
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timed_outputs_are_compared_with_the_references_and_a_missing_one_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let toml = include_str!("../../../../assets/templates/vector-add/rung.toml");
        let spec = crate::spec::Spec::parse(toml, std::path::Path::new("rung.toml")).unwrap();
        let out = &spec.outputs[0];
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let (o, r) = (tmp.path().join("o.bin"), tmp.path().join(format!("{}-ref.bin", out.name)));
        std::fs::write(&r, bytes(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        let mut files = Files::new();
        files.insert(out.name.clone(), (o.clone(), vec![4]));
        let differ = |files: &Files| {
            outputs_differ(&spec, files, |name| reference_file(tmp.path(), name), &mut stats::Clock::new())
        };
        std::fs::write(&o, bytes(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        assert_eq!(differ(&files), None);
        std::fs::write(&o, bytes(&[1.0, 2.0, 3.5, 4.0])).unwrap();
        let why = differ(&files).expect("one element off");
        assert!(why.contains(&format!("`{}`", out.name)), "{why}");
        std::fs::remove_file(&o).unwrap();
        let why = differ(&files).expect("nothing written back");
        assert!(why.contains("0 bytes written back, the reference's 16"), "{why}");
    }
}
