//! Opening the user's editor at a file and line: `$VISUAL`, else `$EDITOR`, else `vi`.

use std::path::Path;

/// The editor the environment names.
pub fn from_env() -> String {
    ["VISUAL", "EDITOR"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "vi".to_string())
}

/// The command line that opens `file` at `line` (and `column` where the editor takes one).
/// `editor` may carry arguments (`code -w`). Editors that take neither form get the file alone.
pub fn command(editor: &str, file: &Path, line: u32, column: u32) -> Vec<String> {
    let mut argv: Vec<String> = editor.split_whitespace().map(str::to_string).collect();
    if argv.is_empty() {
        argv.push("vi".into());
    }
    let program = Path::new(&argv[0]).file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let file = file.display().to_string();
    match program.as_str() {
        // VS Code and its forks, Zed, Sublime: file:line:column.
        "code" | "code-insiders" | "codium" | "cursor" => argv.extend(["-g".into(), format!("{file}:{line}:{column}")]),
        "zed" | "subl" => argv.push(format!("{file}:{line}:{column}")),
        // Helix: file:line:column too.
        "hx" | "helix" => argv.push(format!("{file}:{line}:{column}")),
        // The vi family, Emacs, nano, micro, kak: +line before the file.
        "vi" | "vim" | "nvim" | "gvim" | "view" | "emacs" | "emacsclient" | "nano" | "micro" | "kak" | "mg" | "joe"
        | "ne" => {
            argv.push(format!("+{line}"));
            argv.push(file);
        }
        _ => argv.push(file),
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_editor_family_gets_the_line_its_own_way() {
        let f = Path::new("versions/v002-float4.cu");
        assert_eq!(command("nvim", f, 12, 5), ["nvim", "+12", "versions/v002-float4.cu"]);
        assert_eq!(command("/usr/bin/vim", f, 3, 1), ["/usr/bin/vim", "+3", "versions/v002-float4.cu"]);
        assert_eq!(command("code -w", f, 12, 5), ["code", "-w", "-g", "versions/v002-float4.cu:12:5"]);
        assert_eq!(command("hx", f, 7, 2), ["hx", "versions/v002-float4.cu:7:2"]);
        assert_eq!(command("ed", f, 7, 2), ["ed", "versions/v002-float4.cu"]);
        assert_eq!(command("  ", f, 7, 2), ["vi", "+7", "versions/v002-float4.cu"]);
    }
}
