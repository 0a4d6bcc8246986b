//! Syntax highlighting: syntect's own grammars (C++ for CUDA, Python for Triton) plus rung's
//! PTX and SASS grammars (`assets/syntaxes/`), embedded in the binary. The terminal shells ask
//! for ANSI-coloured lines; the TUI will ask for styled spans from the same set.

use std::sync::OnceLock;

use syntect::easy::HighlightLines;
use syntect::highlighting::{Theme, ThemeSet};
use syntect::parsing::{SyntaxDefinition, SyntaxReference, SyntaxSet};

const PTX: &str = include_str!("../../assets/syntaxes/PTX.sublime-syntax");
const SASS: &str = include_str!("../../assets/syntaxes/SASS.sublime-syntax");

/// syntect's default grammars with PTX and SASS added.
pub fn syntaxes() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(|| {
        let mut b = SyntaxSet::load_defaults_newlines().into_builder();
        for (name, text) in [("PTX", PTX), ("SASS", SASS)] {
            let def =
                SyntaxDefinition::load_from_str(text, true, Some(name)).expect("the embedded grammars are tested");
            b.add(def);
        }
        b.build()
    })
}

fn theme() -> &'static Theme {
    static THEME: OnceLock<Theme> = OnceLock::new();
    THEME.get_or_init(|| {
        let mut set = ThemeSet::load_defaults();
        set.themes.remove("base16-ocean.dark").expect("syntect ships base16-ocean.dark")
    })
}

/// The grammar for a file extension: `cu`/`cuh` are C++, `py` Python, `ptx`, `sass`.
pub fn syntax_for(extension: &str) -> Option<&'static SyntaxReference> {
    let ext = match extension {
        "cu" | "cuh" => "cpp",
        other => other,
    };
    syntaxes().find_syntax_by_extension(ext)
}

/// Lines highlighted for a 24-bit terminal, in order (state carries across lines).
pub fn ansi_lines<'a>(extension: &str, lines: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let Some(syntax) = syntax_for(extension) else { return lines.into_iter().map(str::to_string).collect() };
    let mut h = HighlightLines::new(syntax, theme());
    lines
        .into_iter()
        .map(|l| {
            let text = format!("{l}\n");
            match h.highlight_line(&text, syntaxes()) {
                Ok(ranges) => {
                    let mut s = syntect::util::as_24_bit_terminal_escaped(&ranges, false);
                    s.truncate(s.trim_end_matches('\n').len());
                    s.push_str("\x1b[0m");
                    s
                }
                Err(_) => l.to_string(),
            }
        })
        .collect()
}

/// A piece of a line in one colour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub rgb: (u8, u8, u8),
    pub bold: bool,
    pub text: String,
}

/// Lines split into runs of one colour, for drawing into a buffer (the TUI's code blocks),
/// state carried across lines. `language` is a file extension
/// (`cu`, `py`, `ptx`) or a Markdown fence's word (`cuda`, `python`, `c++`); `None` when no
/// grammar knows it.
pub fn colour_runs<'a>(language: &str, lines: impl IntoIterator<Item = &'a str>) -> Option<Vec<Vec<Run>>> {
    colour_runs_with(theme(), language, lines)
}

/// [`colour_runs`] in the colours of a given syntax theme (the TUI's chosen `.tmTheme`).
pub fn colour_runs_with<'a>(
    theme: &Theme,
    language: &str,
    lines: impl IntoIterator<Item = &'a str>,
) -> Option<Vec<Vec<Run>>> {
    let lang = language.trim().to_ascii_lowercase();
    let ext = match lang.as_str() {
        "cuda" | "c++" | "cxx" | "cc" | "c" | "h" | "hpp" => "cu",
        "python" | "python3" | "triton" => "py",
        other => other,
    };
    let syntax = syntax_for(ext).or_else(|| syntaxes().find_syntax_by_token(&lang))?;
    let mut h = HighlightLines::new(syntax, theme);
    Some(
        lines
            .into_iter()
            .map(|l| {
                let text = format!("{l}\n");
                match h.highlight_line(&text, syntaxes()) {
                    Ok(ranges) => ranges
                        .into_iter()
                        .map(|(st, t)| {
                            let bold = st.font_style.contains(syntect::highlighting::FontStyle::BOLD);
                            let rgb = (st.foreground.r, st.foreground.g, st.foreground.b);
                            Run { rgb, bold, text: t.trim_end_matches('\n').to_string() }
                        })
                        .filter(|r| !r.text.is_empty())
                        .collect(),
                    Err(_) => vec![Run { rgb: (192, 197, 206), bold: false, text: l.to_string() }],
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_version_has_a_grammar() {
        assert_eq!(syntax_for("cu").unwrap().name, "C++");
        assert_eq!(syntax_for("py").unwrap().name, "Python");
        assert_eq!(syntax_for("ptx").unwrap().name, "PTX");
        assert_eq!(syntax_for("sass").unwrap().name, "SASS");
    }

    #[test]
    fn colour_runs_know_fence_words() {
        let runs = colour_runs("cuda", ["__global__ void k(float* a) {}"]).unwrap();
        let joined: String = runs[0].iter().map(|r| r.text.as_str()).collect();
        assert_eq!(joined, "__global__ void k(float* a) {}");
        assert!(runs[0].len() > 3, "{runs:?}");
        assert!(colour_runs("python", ["x = 1"]).is_some());
        assert!(colour_runs("no-such-language", ["x"]).is_none());
    }

    #[test]
    fn ansi_lines_colour_and_reset() {
        let out = ansi_lines("sass", ["        /*0040*/  @P0 LDG.E.128 R4, desc[UR4][R2.64] ;"]);
        assert!(out[0].contains("\x1b[38;2;"), "{:?}", out[0]);
        assert!(out[0].ends_with("\x1b[0m"));
        assert_eq!(ansi_lines("unknown-ext", ["x"]), vec!["x"]);
    }
}
