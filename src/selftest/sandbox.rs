//! The GPU suite's sandbox rows: versions that reach for an SSH key, rung's config, a file
//! outside the workspace, a local port, rung's history or cache or another process's `/proc`
//! entry, run on the GPU inside the sandbox and
//! each refused with what it reached for; and the demo's bench medians inside the sandbox beside
//! the same benches outside it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// One row of the sandbox part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SandboxRow {
    pub name: String,
    pub expected: String,
    pub got: String,
    pub ok: bool,
}

/// How many benches of each demo version run inside the sandbox and as many outside, in turn.
const ROUNDS: usize = 2;
/// The most the mean of a version's medians inside may differ from outside, percent.
const MEDIAN_TOLERANCE_PERCENT: f64 = 1.0;

/// A version that reaches past its sandbox: its file's name in `versions/`, the line put first
/// in the vector-add template's Triton `run()`, and what its denial must name.
pub struct Hostile {
    pub name: &'static str,
    pub line: String,
    pub reaches: &'static str,
}

/// Every hostile version, for a home folder holding `.ssh/id_ed25519` and rung's config, a file
/// `outside` the workspace and a local `port`: reading the key and the config, writing outside,
/// connecting, writing rung's history, listing its reference cache, and writing another
/// process's `/proc` entry (the zygote's: CUDA needs `/proc` written, but only the version's own).
pub fn hostile_cases(home: &Path, outside: &Path, port: u16) -> Vec<Hostile> {
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let case = |name, line: String, reaches| Hostile { name, line, reaches };
    vec![
        case("v004-ssh", format!("print(open({:?}).read())", path(&home.join(".ssh/id_ed25519"))), ".ssh/id_ed25519"),
        case("v005-config", format!("open({:?}).read()", path(&home.join(".config/rung/config.toml"))), "config.toml"),
        case("v006-write", format!("open({:?}, 'w').write('x')", path(outside)), "outside.txt"),
        case("v007-net", format!("import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)"), ""),
        case("v008-history", "open('.rung/history.db', 'ab').write(b'x')".into(), "history.db"),
        case("v009-cache", "import os; os.listdir('.rung/cache')".into(), ".rung/cache"),
        case(
            "v010-proc",
            "import os; p = '/proc/%d/oom_score_adj' % os.getppid(); open(p, 'w').write(open(p).read())".into(),
            "oom_score_adj",
        ),
    ]
}

/// Writes `versions/{name}.py` in a vector-add workspace: its Triton version with `line` first in
/// its `run()`.
pub fn write_hostile(ws: &Path, name: &str, line: &str) -> anyhow::Result<()> {
    let template = std::fs::read_to_string(ws.join("versions/v003-triton.py"))?;
    let anchor = "def run(a, b, out, n):\n";
    anyhow::ensure!(template.contains(anchor), "the vector-add template's run() changed; update the sandbox's cases");
    std::fs::write(
        ws.join(format!("versions/{name}.py")),
        template.replacen(anchor, &format!("{anchor}    {line}\n"), 1),
    )?;
    Ok(())
}

/// `exe check --json ARGS` in `ws` with HOME at `home`, `RUNG_CONFIG` at `config` and
/// `RUNG_SANDBOX=mode` (None: unset, the config decides); rung's own folder is named outright, or
/// the versions would not find the toolchain. The tests' sandbox cases run it too.
pub fn check_as(
    exe: &Path,
    ws: &Path,
    home: &Path,
    config: &Path,
    mode: Option<&str>,
    args: &[&str],
) -> anyhow::Result<serde_json::Value> {
    let mut cmd = Command::new(exe);
    cmd.args(["check", "--json"])
        .args(args)
        .current_dir(ws)
        .env("RUNG_CONFIG", config)
        .env("RUNG_HOME", crate::toolchain::rung_home())
        .env("HOME", home);
    match mode {
        Some(m) => cmd.env("RUNG_SANDBOX", m),
        None => cmd.env_remove("RUNG_SANDBOX"),
    };
    let out = cmd.output()?;
    serde_json::from_slice(&out.stdout).map_err(|e| {
        anyhow::anyhow!(
            "rung check {} (sandbox {}) printed no report ({e}): {}",
            args.join(" "),
            mode.unwrap_or("as configured"),
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
        )
    })
}

/// A version's stage in a `rung check --json` report.
fn stage<'a>(report: &'a serde_json::Value, id: &str, name: &str) -> Option<&'a serde_json::Value> {
    let v = report["versions"].as_array()?.iter().find(|v| v["id"] == id)?;
    v["stages"].as_array()?.iter().find(|s| s["stage"] == name)
}

/// The sandbox on the GPU (`exe` is this binary): each hostile version's run refused
/// (`sandbox-denied`, naming what it reached for) while the honest one beside it passes and
/// records the sandbox it ran in; then the demo's v003 (CUDA) and v004 (Triton) benched
/// [`ROUNDS`] times inside and outside in turn, their mean medians within
/// [`MEDIAN_TOLERANCE_PERCENT`]. Where the kernel has no Landlock, one row says what rung reports.
pub fn run_sandbox(dir: &Path, exe: &Path) -> anyhow::Result<Vec<SandboxRow>> {
    let mut rows = Vec::new();
    let abi = crate::sandbox::kernel_abi();
    if abi == 0 {
        // What the sandbox promises there: no denial, said by `rung doctor` and the TUI's header.
        let said = crate::sandbox::describe();
        rows.push(SandboxRow {
            name: "landlock (skipped)".into(),
            expected: "a kernel with Landlock, or rung doctor saying it has none".into(),
            ok: said.contains("no Landlock"),
            got: said,
        });
        return Ok(rows);
    }
    let home = dir.join("home");
    std::fs::create_dir_all(home.join(".ssh"))?;
    std::fs::create_dir_all(home.join(".config/rung"))?;
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE KEY\n")?;
    std::fs::write(home.join(".config/rung/config.toml"), "[agent]\n")?;
    let ws = dir.join("vector-add");
    crate::templates::write("vector-add", &ws)?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let outside: PathBuf = dir.join("outside.txt");
    let cases = hostile_cases(&home, &outside, port);
    for c in &cases {
        write_hostile(&ws, c.name, &c.line)?;
    }
    let mut ids = vec!["v002", "v003"];
    ids.extend(cases.iter().map(|c| &c.name[..4]));
    ids.push("--no-bench");
    let report = check_as(exe, &ws, &home, &home.join("no-config.toml"), Some("strict"), &ids)?;
    for honest in ["v002", "v003"] {
        let check = stage(&report, honest, "check").map(|s| s["verdict"].as_str().unwrap_or("").to_string());
        let recorded = stage(&report, honest, "run").and_then(|s| s["detail"]["sandbox"].as_str()).unwrap_or("");
        rows.push(SandboxRow {
            name: format!("{honest} (honest)"),
            expected: "check pass, the run recording `strict: Landlock ABI …`".into(),
            got: format!("check {}; {recorded}", check.as_deref().unwrap_or("missing")),
            ok: check.as_deref() == Some("pass") && recorded.starts_with("strict: Landlock ABI"),
        });
    }
    for Hostile { name, reaches, .. } in &cases {
        let run = stage(&report, &name[..4], "run");
        let (verdict, reason, summary) = run.map_or(("missing", "", ""), |s| {
            (
                s["verdict"].as_str().unwrap_or(""),
                s["reason"].as_str().unwrap_or(""),
                s["summary"].as_str().unwrap_or(""),
            )
        });
        rows.push(SandboxRow {
            name: name.to_string(),
            expected: format!("run fail sandbox-denied naming `{reaches}`"),
            got: format!("run {verdict} {reason}: {summary}"),
            ok: verdict == "fail" && reason == "sandbox-denied" && summary.contains(reaches),
        });
    }
    listener.set_nonblocking(true)?;
    let reached = listener.accept().is_ok();
    rows.push(SandboxRow {
        name: "outside".into(),
        expected: "nothing written outside, no connection to the port".into(),
        got: format!(
            "outside.txt {}, port {}",
            if outside.exists() { "written" } else { "absent" },
            if reached { "reached" } else { "not reached" }
        ),
        ok: !outside.exists() && !reached,
    });
    rows.extend(medians_inside_and_out(dir, exe, &home)?);
    Ok(rows)
}

/// The demo's v003 and v004 benched inside the sandbox and outside it, in turn.
fn medians_inside_and_out(dir: &Path, exe: &Path, home: &Path) -> anyhow::Result<Vec<SandboxRow>> {
    let demo = dir.join("demo");
    crate::templates::write("rmsnorm", &demo)?;
    let ids = ["v003", "v004"];
    let mut medians: Vec<[Vec<f64>; 2]> = vec![Default::default(); ids.len()];
    for _ in 0..ROUNDS {
        for (m, mode) in ["strict", "off"].into_iter().enumerate() {
            let report = check_as(exe, &demo, home, &home.join("no-config.toml"), Some(mode), &ids)?;
            for (i, id) in ids.iter().enumerate() {
                let median =
                    stage(&report, id, "bench").and_then(|s| s["detail"]["sizes"][0]["headline"]["median"].as_f64());
                medians[i][m].extend(median);
            }
        }
    }
    let mean = |xs: &[f64]| xs.iter().sum::<f64>() / xs.len().max(1) as f64;
    Ok(ids
        .iter()
        .zip(&medians)
        .map(|(id, [inside, outside])| {
            let (a, b) = (mean(inside), mean(outside));
            let delta = 100.0 * (a / b - 1.0);
            SandboxRow {
                name: format!("{id} bench"),
                expected: format!("{ROUNDS} medians inside within {MEDIAN_TOLERANCE_PERCENT}% of {ROUNDS} outside"),
                got: format!(
                    "inside {:?} µs, outside {:?} µs: {delta:+.2}%",
                    inside.iter().map(|m| (m * 1e4).round() / 10.0).collect::<Vec<_>>(),
                    outside.iter().map(|m| (m * 1e4).round() / 10.0).collect::<Vec<_>>()
                ),
                ok: inside.len() == ROUNDS && outside.len() == ROUNDS && delta.abs() <= MEDIAN_TOLERANCE_PERCENT,
            }
        })
        .collect())
}
