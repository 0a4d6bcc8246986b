//! Where the user's config file is: `$RUNG_CONFIG`, else `$XDG_CONFIG_HOME/rung/config.toml`,
//! else `~/.config/rung/config.toml`, on every platform. One file holds the agent's `[agent]`,
//! the TUI's tables and the core's `[sandbox]`; each part reads its own table.

use std::path::PathBuf;

/// The config file: `$RUNG_CONFIG`, else [`user_path`].
pub fn default_path() -> Option<PathBuf> {
    default_path_in(std::env::var_os("RUNG_CONFIG"))
}

/// [`default_path`] given `$RUNG_CONFIG` (an empty variable is unset).
pub fn default_path_in(rung_config: Option<std::ffi::OsString>) -> Option<PathBuf> {
    rung_config.filter(|p| !p.is_empty()).map(PathBuf::from).or_else(user_path)
}

/// The user's config file, read by the TUI and the agent: `$XDG_CONFIG_HOME/rung/config.toml`,
/// else `~/.config/rung/config.toml`, on every platform.
pub fn user_path() -> Option<PathBuf> {
    user_path_in(std::env::var_os("XDG_CONFIG_HOME"), dirs::home_dir())
}

/// [`user_path`] given `$XDG_CONFIG_HOME` and the home folder (an empty variable is unset).
pub fn user_path_in(xdg_config_home: Option<std::ffi::OsString>, home: Option<PathBuf>) -> Option<PathBuf> {
    let base =
        xdg_config_home.filter(|v| !v.is_empty()).map(PathBuf::from).or_else(|| home.map(|h| h.join(".config")))?;
    Some(base.join("rung").join("config.toml"))
}
