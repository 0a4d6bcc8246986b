//! The timed outputs re-checked against the reference at the benchmark size.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::inputs;
use crate::metrics;
use crate::model::protocol::{self, CallMode, Op, TensorFile};
use crate::runners::Runners;
use crate::spec::{SizeSet, Spec};
use crate::stages::{Files, call_args};
use crate::workspace::Workspace;

use super::*;

/// Compares the written-back outputs with the reference at the benchmark size (not cached: a
/// benchmark-size reference is large).
pub(super) fn recheck(
    ws: &Workspace,
    spec: &Spec,
    runners: &mut Runners,
    sizes: &SizeSet,
    seed: u64,
    files: &BTreeMap<String, (PathBuf, Vec<i64>)>,
    dir: &std::path::Path,
) -> Option<String> {
    let reference = ws.reference.clone().filter(|r| r.extension().is_some_and(|e| e == "py"))?;
    let ref_source = std::fs::read_to_string(ws.root.join(&reference)).unwrap_or_default();
    let params: Vec<String> = crate::stages::prepare::python_def_params(&ref_source, "reference")
        .map(|(p, _)| p.into_iter().map(|(n, _)| n).collect())
        .unwrap_or_else(|| spec.inputs.iter().map(|t| t.name.clone()).collect());
    let _ = seed;
    let mut returns = BTreeMap::new();
    for t in &spec.outputs {
        let shape = spec.shape_at(t, sizes).unwrap_or_default();
        returns.insert(
            t.name.clone(),
            TensorFile { path: dir.join(format!("{}-ref.bin", t.name)), dtype: t.dtype, shape },
        );
    }
    let args = call_args(spec, &params, sizes, |t, _| {
        let (path, shape) = &files[&t.name];
        TensorFile { path: path.clone(), dtype: t.dtype, shape: shape.clone() }
    })
    .ok()?;
    let call = protocol::Call {
        file: reference,
        function: "reference".into(),
        mode: CallMode::Reference,
        args,
        returns: returns.clone(),
        guard_bytes: 0,
    };
    // The reference runs in a child of its own (the version's child, if any, has ended).
    let z = runners.zygote(false).ok()?;
    if !z.fork(CallMode::Reference, Duration::from_secs(60)).is_ok_and(|r| r.ok) {
        return Some("the reference could not run at the benchmark size".into());
    }
    let resp = z.call(Op::Call(call), spec.limits.run * 4);
    runners.end_children();
    match resp {
        Ok(r) if r.ok => {}
        Ok(r) => return Some(format!("the reference failed: {}", r.error.map(|e| e.message).unwrap_or_default())),
        Err(e) => return Some(format!("the reference failed: {e}")),
    }
    outputs_differ(spec, files, |name| &returns[name].path)
}

/// Why the timed outputs in `files` are not the reference's (read from `reference(name)`), by
/// each output's tolerance; `None` when every one matches.
fn outputs_differ<'a>(
    spec: &Spec,
    files: &'a Files,
    reference: impl Fn(&str) -> &'a std::path::Path,
) -> Option<String> {
    for t in &spec.outputs {
        let shape: Vec<usize> = files[&t.name].1.iter().map(|d| *d as usize).collect();
        let o = inputs::to_f64(t.dtype, &std::fs::read(&files[&t.name].0).unwrap_or_default());
        let r = inputs::to_f64(t.dtype, &std::fs::read(reference(&t.name)).unwrap_or_default());
        let c = metrics::compare(&o, &r, &shape, &t.tolerance);
        if let Some(why) = metrics::judge(&c, &t.tolerance) {
            return Some(format!("`{}`: {why}", t.name));
        }
    }
    None
}

/// [`recheck`] against a CUDA reference, launched in the native worker on the same inputs.
pub(super) fn recheck_native(
    spec: &Spec,
    runners: &mut Runners,
    launch_at: LaunchAt,
    sizes: &SizeSet,
    files: &Files,
    dir: &std::path::Path,
) -> Option<String> {
    let mut rfiles = files.clone();
    for t in &spec.outputs {
        let shape = spec.shape_at(t, sizes).unwrap_or_default();
        let path = dir.join(format!("{}-ref.bin", t.name));
        let len = shape.iter().product::<i64>() as usize * t.dtype.size_bytes();
        if let Err(e) = std::fs::write(&path, vec![0xffu8; len]) {
            return Some(format!("{}: {e}", path.display()));
        }
        rfiles.insert(t.name.clone(), (path, shape));
    }
    let launch = match launch_at(sizes, &rfiles) {
        Ok(l) => l,
        Err(m) => return Some(format!("the reference cannot be launched: {m}")),
    };
    match runners.launch(launch, spec.limits.run * 4) {
        Ok(r) if r.ok => {}
        Ok(r) => return Some(format!("the reference failed: {}", r.error.map(|e| e.message).unwrap_or_default())),
        Err(e) => return Some(format!("the reference failed: {e}")),
    }
    outputs_differ(spec, files, |name| &rfiles[name].0)
}
