//! Colours by role. A UI theme (`themes/NAME.toml`) names a colour for each role of the screen and
//! the syntax theme (`themes/NAME.tmTheme`, for syntect) its listings use; both kinds are embedded
//! in the binary, so a theme works wherever the binary runs. Under NO_COLOR nothing is coloured.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use include_dir::{Dir, include_dir};
use ratatui::style::{Color, Style};
use rung_core::diag::{Diagnostic, Pos};
use serde::{Deserialize, Serialize};

static THEMES: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../../themes");

/// The theme used when neither `--theme` nor the settings name one.
pub const DEFAULT: &str = "dark";

/// What a colour is for. Panes ask for a role, never for a colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    Text,
    Dim,
    Accent,
    /// The focused pane's border.
    Focus,
    /// The selected row.
    Selected,
    Pass,
    Fail,
    Error,
    Skipped,
    Warning,
    Note,
    Help,
    /// The fastest version in the timing chart.
    Best,
    Reference,
    Roofline,
    Baseline,
}

impl Role {
    pub const ALL: [Role; 16] = [
        Role::Text,
        Role::Dim,
        Role::Accent,
        Role::Focus,
        Role::Selected,
        Role::Pass,
        Role::Fail,
        Role::Error,
        Role::Skipped,
        Role::Warning,
        Role::Note,
        Role::Help,
        Role::Best,
        Role::Reference,
        Role::Roofline,
        Role::Baseline,
    ];
}

#[derive(Debug, Clone)]
pub struct Theme {
    pub name: String,
    /// The syntax theme's name (a `.tmTheme` in `themes/`).
    pub syntax: String,
    colors: BTreeMap<Role, Color>,
    /// One colour per GPU in the timing chart, in turn.
    pub series: Vec<Color>,
    /// The error map's ramp, smallest error first.
    pub heat: Vec<Color>,
    /// False under NO_COLOR: every style is plain.
    pub color: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ThemeFile {
    name: String,
    syntax: String,
    colors: ColorsFile,
}

/// Not `deny_unknown_fields` (serde does not combine it with `flatten`): an unknown key is an
/// unknown role all the same.
#[derive(Deserialize)]
struct ColorsFile {
    #[serde(flatten)]
    roles: BTreeMap<Role, String>,
    series: Vec<String>,
    heat: Vec<String>,
}

impl Default for Theme {
    fn default() -> Theme {
        Theme::named(DEFAULT).expect("the embedded default theme parses")
    }
}

impl Theme {
    /// The names of the embedded UI themes.
    pub fn names() -> Vec<String> {
        embedded("toml").map(|(name, _)| name).collect()
    }

    /// An embedded UI theme, or an error that lists the ones there are.
    pub fn named(name: &str) -> Result<Theme, String> {
        let Some((_, text)) = embedded("toml").find(|(n, _)| n == name) else {
            return Err(format!("no theme `{name}`; the themes are: {}", Theme::names().join(", ")));
        };
        Theme::parse(text, Path::new(&format!("themes/{name}.toml"))).map_err(|d| d.to_string())
    }

    /// A UI theme's TOML; every role must have a colour.
    pub fn parse(text: &str, path: &Path) -> Result<Theme, Box<Diagnostic>> {
        let file: ThemeFile =
            rung_core::tomlfile::deserialize_toml(text, path, "see the TOML syntax at toml.io", |_| None)?;
        let at = |what: &str| {
            let offset = text.find(&format!("\"{what}\"")).unwrap_or(0);
            Pos::of_offset(text, offset)
        };
        let color = |s: &str| {
            s.parse::<Color>().map_err(|_| {
                Box::new(
                    Diagnostic::error(path, at(s), format!("`{s}` is not a colour"))
                        .with_help("use a terminal colour name (red, light-blue, dark-gray, reset), 0-255, or #rrggbb"),
                )
            })
        };
        let mut colors = BTreeMap::new();
        for (role, s) in &file.colors.roles {
            colors.insert(*role, color(s)?);
        }
        if let Some(missing) = Role::ALL.iter().find(|r| !colors.contains_key(r)) {
            let name = serde_json::to_value(missing).ok().and_then(|v| v.as_str().map(str::to_string));
            return Err(Box::new(
                Diagnostic::error(path, Pos::WHOLE_FILE, format!("no colour for `{}`", name.unwrap_or_default()))
                    .with_help("every role needs a colour: copy the missing line from themes/dark.toml"),
            ));
        }
        let list = |v: &[String], key: &str| -> Result<Vec<Color>, Box<Diagnostic>> {
            if v.is_empty() {
                return Err(Box::new(
                    Diagnostic::error(path, Pos::WHOLE_FILE, format!("`colors.{key}` is empty"))
                        .with_help("give it at least one colour"),
                ));
            }
            v.iter().map(|s| color(s)).collect()
        };
        Ok(Theme {
            name: file.name,
            syntax: file.syntax,
            colors,
            series: list(&file.colors.series, "series")?,
            heat: list(&file.colors.heat, "heat")?,
            color: true,
        })
    }

    /// The same theme with no colour at all (NO_COLOR).
    pub fn plain(mut self, plain: bool) -> Theme {
        self.color = !plain;
        self
    }

    pub fn color(&self, role: Role) -> Color {
        if self.color { self.colors.get(&role).copied().unwrap_or(Color::Reset) } else { Color::Reset }
    }

    /// The role's foreground, or no style at all under NO_COLOR.
    pub fn fg(&self, role: Role) -> Style {
        if self.color { Style::new().fg(self.color(role)) } else { Style::new() }
    }

    /// `style` as given, or without its colours under NO_COLOR (bold and the like stay).
    pub fn paint(&self, style: Style) -> Style {
        if self.color { style } else { Style { fg: None, bg: None, underline_color: None, ..style } }
    }

    /// The colour of a share of the largest error, 0 to 1.
    pub fn heat(&self, share: f64) -> Color {
        if !self.color || self.heat.is_empty() {
            return Color::Reset;
        }
        let i = (share.clamp(0.0, 1.0) * (self.heat.len() - 1) as f64).round() as usize;
        self.heat[i]
    }

    pub fn series(&self, i: usize) -> Color {
        if self.color { self.series[i % self.series.len()] } else { Color::Reset }
    }
}

/// The embedded syntax themes' names.
pub fn syntax_names() -> Vec<String> {
    embedded("tmTheme").map(|(name, _)| name).collect()
}

/// An embedded syntax theme, for syntect.
pub fn syntax(name: &str) -> Result<syntect::highlighting::Theme, String> {
    let Some((_, text)) = embedded("tmTheme").find(|(n, _)| n == name) else {
        return Err(format!("no syntax theme `{name}`; the syntax themes are: {}", syntax_names().join(", ")));
    };
    syntect::highlighting::ThemeSet::load_from_reader(&mut Cursor::new(text.as_bytes()))
        .map_err(|e| format!("themes/{name}.tmTheme: {e}"))
}

/// `(name, text)` of each embedded file with this extension, by name.
fn embedded(ext: &'static str) -> impl Iterator<Item = (String, &'static str)> {
    let mut files: Vec<(String, &'static str)> = THEMES
        .files()
        .filter(|f| f.path().extension().is_some_and(|e| e == ext))
        .filter_map(|f| Some((f.path().file_stem()?.to_str()?.to_string(), f.contents_utf8()?)))
        .collect();
    files.sort();
    files.into_iter()
}
