//! Process exit codes, documented in the README ("Exit codes"). Scripts and CI gate on them.

use crate::model::report::{CheckReport, Stage, Verdict};

/// Every version checked passed every rung that could run here.
pub const OK: i32 = 0;
/// A version ran but is wrong (run, check or a user rung failed).
pub const CHECK_FAILED: i32 = 1;
/// Bad command-line usage (clap's own code).
pub const USAGE: i32 = 2;
/// A version does not build (including launch-header and signature errors).
pub const BUILD_FAILED: i32 = 3;
/// The workspace is invalid: rung.toml, a missing reference, duplicate version ids, an unknown
/// version named on the command line.
pub const WORKSPACE_INVALID: i32 = 4;
/// rung itself or a tool broke (I/O, database, a crashed worker); not the version's fault.
pub const INTERNAL: i32 = 5;
/// A benchmark regressed beyond `--max-regression`.
pub const REGRESSION: i32 = 6;

/// The exit code of a check, most serious first: workspace, internal, build, check.
pub fn for_report(r: &CheckReport) -> i32 {
    if r.diagnostics.iter().any(|d| d.is_error()) {
        return WORKSPACE_INVALID;
    }
    let stages = || r.versions.iter().flat_map(|v| &v.stages);
    if stages().any(|s| s.verdict == Verdict::Error) {
        return INTERNAL;
    }
    if stages().any(|s| s.verdict == Verdict::Fail && matches!(s.stage, Stage::Prepare | Stage::Build)) {
        return BUILD_FAILED;
    }
    if stages().any(|s| s.verdict == Verdict::Fail) {
        return CHECK_FAILED;
    }
    OK
}
