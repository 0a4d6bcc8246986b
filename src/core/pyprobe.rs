//! What a Python says of itself: its version, the versions of rung's packages, where its
//! nvidia/cu13 wheels are, and the folders it reads (for the sandbox). Asked with one `python
//! -c`, without importing any of the packages, and remembered in rung's home while nothing the
//! answer came from has changed: every `rung` command starts by finding its toolchain, and the
//! two Python starts this took (about 0.13 s on the development machine) came before the first
//! build of every check.
//!
//! The answer is reused only when every path it came from is as it was (size and modification
//! time): the interpreter (its stamp is its link's target's), each folder on its `sys.path`, its
//! prefixes, its user site (absent then present counts as a change), and the `nvidia` namespace
//! folders. Installing, removing or upgrading a package adds or renames entries in one of those
//! folders, which changes its modification time. The `PYTHON*` variables and `HOME`, which
//! change what `sys.path` holds, are part of the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{LazyLock, Mutex};

use serde::{Deserialize, Serialize};

/// The probe. It prints one JSON object: `__version`, one entry per installed package of rung's,
/// `__nvidia_cu13` when found, `__folders` (prefixes and `sys.path`), `__user_site` and
/// `__nvidia` (the namespace package's folders).
const PROBE: &str = r#"
import importlib.util, importlib.metadata, json, os, site, sys
out = {"__version": sys.version.split()[0]}
for mod, dist in [("numpy","numpy"),("triton","triton"),("torch","torch"),("cutlass","nvidia-cutlass-dsl"),("tilelang","tilelang")]:
    try:
        if importlib.util.find_spec(mod) is not None:
            try: out[mod] = importlib.metadata.version(dist)
            except Exception: out[mod] = "unknown"
    except Exception: pass
nvidia = []
try:
    spec = importlib.util.find_spec("nvidia")
    nvidia = list(spec.submodule_search_locations or []) if spec else []
    for base in nvidia:
        d = os.path.join(base, "cu13")
        if os.path.isdir(os.path.join(d, "bin")): out["__nvidia_cu13"] = d; break
except Exception: pass
out["__nvidia"] = nvidia
out["__folders"] = [sys.prefix, sys.base_prefix, sys.exec_prefix] + sys.path
try: out["__user_site"] = site.getusersitepackages()
except Exception: pass
print(json.dumps(out))
"#;

/// What the probe said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// `__version`, the packages' versions and `__nvidia_cu13`, as strings.
    pub answer: BTreeMap<String, String>,
    /// What the sandbox lets a process of this Python read: its prefixes and `sys.path`, and the
    /// interpreter's own prefix wherever its links lead.
    pub folders: Vec<PathBuf>,
}

/// One remembered answer: the paths it came from, each with its stamp when asked.
#[derive(Debug, Serialize, Deserialize)]
struct Remembered {
    stamps: Vec<(PathBuf, String)>,
    probe: Probe,
}

/// The file in rung's home that remembers the answers, by [`key`].
pub const REMEMBERED: &str = "python-probes.json";

/// Folders by interpreter, for this process: the sandbox asks for them at every worker start.
static FOLDERS: LazyLock<Mutex<BTreeMap<PathBuf, Vec<PathBuf>>>> = LazyLock::new(|| Mutex::new(BTreeMap::new()));

/// A path's size and modification time, or `absent`.
fn stamp(p: &Path) -> String {
    match std::fs::metadata(p) {
        Ok(m) => format!(
            "{}|{}",
            m.len(),
            m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos())
        ),
        Err(_) => "absent".into(),
    }
}

/// The interpreter, with what changes what its `sys.path` holds.
fn key(python: &Path) -> String {
    let mut vars: Vec<String> = std::env::vars_os()
        .filter(|(k, _)| k.to_string_lossy().starts_with("PYTHON") || k == "HOME")
        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
        .collect();
    vars.sort();
    format!("{}|{}", python.display(), vars.join("|"))
}

/// Asks `python` (from `/`, so nothing of a workspace is imported), or reuses the answer
/// remembered under `home` while its stamps hold. `home: None` always asks and remembers nothing.
pub fn probe(python: &Path, home: Option<&Path>) -> Option<Probe> {
    let file = home.map(|h| h.join(REMEMBERED));
    let key = key(python);
    let mut remembered: BTreeMap<String, Remembered> = file
        .as_ref()
        .and_then(|f| std::fs::read(f).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    if let Some(r) = remembered.get(&key)
        && r.stamps.iter().all(|(p, s)| stamp(p) == *s)
    {
        FOLDERS.lock().unwrap_or_else(|e| e.into_inner()).insert(python.to_path_buf(), r.probe.folders.clone());
        return Some(r.probe.clone());
    }
    let (probe, read) = ask(python)?;
    FOLDERS.lock().unwrap_or_else(|e| e.into_inner()).insert(python.to_path_buf(), probe.folders.clone());
    if let Some(file) = file {
        let stamps = read.into_iter().map(|p| (p.clone(), stamp(&p))).collect();
        remembered.insert(key, Remembered { stamps, probe: probe.clone() });
        // Best effort: a lost race or a read-only home only costs a probe next time.
        if let Some(dir) = file.parent()
            && std::fs::create_dir_all(dir).is_ok()
        {
            let tmp = file.with_extension(format!("tmp{}", crate::store::unique()));
            if std::fs::write(&tmp, serde_json::to_vec(&remembered).unwrap_or_default()).is_ok() {
                let _ = std::fs::rename(&tmp, &file);
            }
        }
    }
    Some(probe)
}

/// Runs the probe: its answer, and every path the answer came from.
fn ask(python: &Path) -> Option<(Probe, Vec<PathBuf>)> {
    let out = Command::new(python).args(["-c", PROBE]).current_dir("/").output().ok()?;
    if !out.status.success() {
        return None;
    }
    let mut map: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&out.stdout).ok()?;
    let strings = |v: Option<serde_json::Value>| -> Vec<String> {
        match v {
            Some(serde_json::Value::Array(a)) => a.into_iter().filter_map(|s| s.as_str().map(String::from)).collect(),
            Some(serde_json::Value::String(s)) => vec![s],
            _ => vec![],
        }
    };
    let folders = strings(map.remove("__folders"));
    let user_site = strings(map.remove("__user_site"));
    let nvidia = strings(map.remove("__nvidia"));
    let answer: BTreeMap<String, String> =
        map.into_iter().filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_string()))).collect();
    answer.get("__version")?;
    // The interpreter's stamp follows its link: a link led elsewhere, or its target replaced,
    // changes it.
    let mut read: Vec<PathBuf> = vec![python.to_path_buf()];
    read.extend(folders.iter().chain(&user_site).chain(&nvidia).filter(|p| !p.is_empty()).map(PathBuf::from));
    read.extend(answer.get("__nvidia_cu13").map(PathBuf::from));
    read.sort();
    read.dedup();
    Some((Probe { folders: readable(python, folders), answer }, read))
}

/// The folders a process of this Python reads: what it reported, and its own prefix wherever
/// its links lead.
fn readable(python: &Path, reported: Vec<String>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        reported.into_iter().filter(|p| !p.is_empty() && p != "/").map(PathBuf::from).collect();
    if let Ok(real) = python.canonicalize()
        && let Some(prefix) = real.parent().and_then(Path::parent)
    {
        dirs.push(prefix.to_path_buf());
    }
    if let Some(dir) = python.parent().and_then(Path::parent) {
        dirs.push(dir.to_path_buf());
    }
    dirs.sort();
    dirs.dedup();
    dirs
}

/// The folders a process of `python` reads: from its probe in this process, else asked now.
pub fn folders(python: &Path) -> Vec<PathBuf> {
    if let Some(f) = FOLDERS.lock().unwrap_or_else(|e| e.into_inner()).get(python) {
        return f.clone();
    }
    let folders = ask(python).map(|(p, _)| p.folders).unwrap_or_else(|| readable(python, vec![]));
    FOLDERS.lock().unwrap_or_else(|e| e.into_inner()).insert(python.to_path_buf(), folders.clone());
    folders
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in Python that counts its starts and answers as the probe would, its sys.path
    /// one folder.
    fn fake_python(dir: &Path, site: &Path, triton: &str) -> PathBuf {
        let py = dir.join("python");
        let count = dir.join("starts");
        let answer = format!(
            r#"{{"__version": "3.11.9", "numpy": "2.1.0", "triton": "{triton}", "__folders": ["{site}"], "__nvidia": []}}"#,
            site = site.display()
        );
        std::fs::write(&py, format!("#!/bin/sh\necho x >> '{}'\necho '{answer}'\n", count.display())).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&py, std::fs::Permissions::from_mode(0o755)).unwrap();
        py
    }

    fn starts(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("starts")).map_or(0, |s| s.lines().count())
    }

    /// The answer is asked once and then remembered; a package added to a folder on its path,
    /// or another interpreter at the same path, asks again; without a home nothing is kept.
    #[test]
    fn a_probe_is_remembered_until_what_it_read_changes() {
        let tmp = tempfile::tempdir().unwrap();
        let (home, site) = (tmp.path().join("home"), tmp.path().join("site-packages"));
        std::fs::create_dir_all(&site).unwrap();
        let py = fake_python(tmp.path(), &site, "3.5.0");
        let first = probe(&py, Some(&home)).unwrap();
        assert_eq!(first.answer.get("triton").map(String::as_str), Some("3.5.0"));
        assert_eq!(first.answer.get("__version").map(String::as_str), Some("3.11.9"));
        assert!(first.folders.contains(&site), "{:?}", first.folders);
        assert_eq!(starts(tmp.path()), 1);
        assert_eq!(probe(&py, Some(&home)).unwrap(), first);
        assert_eq!(starts(tmp.path()), 1, "an unchanged Python was asked again");

        // A package installed: an entry added to site-packages.
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::create_dir(site.join("torch")).unwrap();
        probe(&py, Some(&home)).unwrap();
        assert_eq!(starts(tmp.path()), 2, "a changed site-packages was not seen");
        assert_eq!(probe(&py, Some(&home)).unwrap(), first);
        assert_eq!(starts(tmp.path()), 2);

        // Another interpreter at the same path (an upgrade): asked again, its answer taken.
        std::thread::sleep(std::time::Duration::from_millis(20));
        fake_python(tmp.path(), &site, "3.6.0");
        let upgraded = probe(&py, Some(&home)).unwrap();
        assert_eq!(starts(tmp.path()), 3);
        assert_eq!(upgraded.answer.get("triton").map(String::as_str), Some("3.6.0"));

        // No home: asked every time.
        probe(&py, None).unwrap();
        probe(&py, None).unwrap();
        assert_eq!(starts(tmp.path()), 5);
        assert_eq!(folders(&py), upgraded.folders);
    }
}
