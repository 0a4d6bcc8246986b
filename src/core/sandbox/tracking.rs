//! What compute-sanitizer's tracking of its target's processes needs from inside the sandbox.

use std::path::PathBuf;

/// What a profiler's tracking of its target's processes needs from inside the sandbox, read
/// from the variables it hands that target. compute-sanitizer (with `--target-processes all`)
/// follows every process its target starts through FIFOs it makes in
/// `/tmp/NVIDIA-treetracker-XXXXXX/` and names in `NVIDIA-PROCESS-TRACKING-CONFIGURATION`
/// (`tree-tracker-id:`), and preloads its injection libraries from the folders named in
/// `launcher-preload-prepend:`. Without them writable and readable, the target's first fork
/// waits for ever on a FIFO it cannot make. Only that one folder, made for this run: the rest
/// of /tmp stays shut.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ToolTracking {
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
}

/// The variable compute-sanitizer (and Nsight tools) set for their targets.
pub const TRACKING_VAR: &str = "NVIDIA-PROCESS-TRACKING-CONFIGURATION";

impl ToolTracking {
    pub fn from_env() -> ToolTracking {
        std::env::var(TRACKING_VAR).map(|c| ToolTracking::parse(&c)).unwrap_or_default()
    }

    /// The folders in a tracking configuration (YAML, one `key: value` a line). The tracker's
    /// folder must be an absolute path directly in a temporary folder (`/tmp`, `/var/tmp` or
    /// `$TMPDIR`) and named as NVIDIA's tools name it: a configuration handed in by anyone else
    /// cannot open the workspace's state or the home folder this way.
    pub fn parse(config: &str) -> ToolTracking {
        let mut out = ToolTracking::default();
        let temp: Vec<PathBuf> = ["/tmp", "/var/tmp"]
            .into_iter()
            .map(PathBuf::from)
            .chain(std::env::var_os("TMPDIR").map(PathBuf::from))
            .collect();
        for line in config.lines() {
            let Some((key, value)) = line.split_once(':') else { continue };
            let value = PathBuf::from(value.trim());
            if !value.is_absolute() || value.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
                continue;
            }
            match key.trim() {
                "tree-tracker-id" => {
                    let named = value.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("NVIDIA-"));
                    let in_temp = value.parent().is_some_and(|p| temp.iter().any(|t| t == p));
                    if named && in_temp {
                        out.write.push(value);
                    }
                }
                "launcher-preload-prepend" => out.read.push(value),
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sanitizers_own_tracker_folder_is_opened() {
        let config = "blocking-rpc-events:\n  - AfterExit\nconnection-name: /tmp/NVIDIA-treetracker-0QnvfD/pipe-0\n\
                      uid: 0\ntree-tracker-id: /tmp/NVIDIA-treetracker-0QnvfD\nis-tracking-root-only: false\n\
                      launcher-preload-prepend: /usr/local/cuda/compute-sanitizer\n";
        let t = ToolTracking::parse(config);
        assert_eq!(t.write, vec![PathBuf::from("/tmp/NVIDIA-treetracker-0QnvfD")]);
        assert_eq!(t.read, vec![PathBuf::from("/usr/local/cuda/compute-sanitizer")]);
        for hostile in [
            "tree-tracker-id: /tmp",
            "tree-tracker-id: /home/me/NVIDIA-x",
            "tree-tracker-id: /tmp/NVIDIA-x/../../root",
            "tree-tracker-id: NVIDIA-x",
            "tree-tracker-id: /tmp/x/NVIDIA-x",
        ] {
            assert_eq!(ToolTracking::parse(hostile).write, Vec::<PathBuf>::new(), "{hostile}");
        }
    }
}
