//! The terminal UI: `rung` in a workspace on a terminal, or `rung tui`. A shell over the core:
//! the scheduler `rung watch` runs, run in this process, feeds one event loop; the panes read the
//! history; the chat side panel streams the agent's turns into the same loop. Nothing in the core
//! knows of this module.

pub mod action;
pub mod app;
pub mod asm_view;
pub mod chat;
pub mod chat_session;
pub mod config;
pub mod editor;
pub mod event;
pub mod layout;
pub mod panes;
pub mod terminal;
pub mod theme;
pub mod trace_view;
pub mod view;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use rung_core::watch::WatchOptions;

use app::App;
use theme::Role;

#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Check every version when the TUI starts (otherwise only what changes).
    pub check: bool,
    pub no_bench: bool,
    /// Colours (off under NO_COLOR).
    pub color: bool,
    /// `--theme`: wins over the settings file.
    pub theme: Option<String>,
}

/// Runs until the user quits; returns the exit code.
pub fn run(root: &Path, opts: &Options) -> anyhow::Result<i32> {
    let mut app = App::open(root, opts.color)?;
    let (config, problem) = config::Config::load(config::user_path().as_deref(), opts.theme.as_deref());
    app.keymap = config.keymap;
    app.theme = config.theme.plain(!opts.color);
    app.set_syntax_theme(&config.syntax_theme);
    app.mouse = config.mouse;
    let from = config.path.as_ref().map_or_else(|| "the defaults".to_string(), |p| p.display().to_string());
    app.log(rung_core::store::now_ms(), Role::Dim, format!("settings from {from}; theme {}", app.theme.name));
    if let Some(d) = problem {
        app.say(Role::Fail, config::problem_line(&d));
    }
    // SIGTERM, SIGINT and SIGHUP end the loop like `q`, so the terminal is put back.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(signal, stop.clone())?;
    }
    // Jobs of the selected version queued from now on go first: the scheduler reads this at each
    // push, as the selection moves.
    let focus = rung_core::watch::Focus::new(app.selected_version().map(|v| v.id.clone()));
    let watch =
        WatchOptions { initial: opts.check, no_bench: opts.no_bench, focus: focus.clone(), ..Default::default() };
    let (tx, rx) = mpsc::channel();
    app.events = Some(tx.clone());
    // The chat reads `[agent]` from the file `rung chat` reads, when it first opens.
    app.chat.config_path = rung_agent::config::default_path();
    app.chat.events = Some(tx.clone());
    let (mut term, _session) = terminal::enter(&app.state_dir.join("logs").join("tui.log"))?;
    let sources = event::spawn(&tx, app.root.clone(), watch, config.tick);
    let size = term.size()?;
    app.area = ratatui::layout::Rect::new(0, 0, size.width, size.height);
    if !app.mouse {
        terminal::mouse(false);
    }
    term.draw(|f| view::draw(&app, f))?;
    // Ticks wake the loop, so a signal is seen within one tick.
    while let Ok(first) = rx.recv() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        // Apply everything that is waiting, then draw once.
        let mut dirty = app.update(first);
        while !app.quit
            && let Ok(more) = rx.try_recv()
        {
            dirty |= app.update(more);
        }
        if app.quit {
            break;
        }
        if std::mem::take(&mut app.suspend) {
            sources.pause_input(true);
            std::thread::sleep(event::INPUT_POLL + Duration::from_millis(20));
            terminal::suspend();
            // Stops here until the shell's `fg` continues the process.
            // SAFETY: raising a signal at this process has no memory effects.
            unsafe { libc::raise(libc::SIGTSTP) };
            terminal::resume(&mut term)?;
            if !app.mouse {
                terminal::mouse(false);
            }
            sources.pause_input(false);
            app.say(Role::Dim, "resumed");
            dirty = true;
        }
        if let Some(target) = app.edit.take() {
            // The editor owns the terminal until it exits: input stops being read meanwhile.
            sources.pause_input(true);
            std::thread::sleep(event::INPUT_POLL + Duration::from_millis(20));
            terminal::suspend();
            let argv = editor::command(&editor::from_env(), &target.file, target.line, target.column);
            let ran = std::process::Command::new(&argv[0]).args(&argv[1..]).current_dir(&app.root).status();
            terminal::resume(&mut term)?;
            if !app.mouse {
                terminal::mouse(false);
            }
            sources.pause_input(false);
            app.message = Some(match ran {
                Ok(s) if s.success() => format!("back from {}", argv[0]),
                Ok(s) => format!("{} exited with {s}", argv[0]),
                Err(e) => format!("cannot run the editor `{}`: {e} (set $VISUAL or $EDITOR)", argv[0]),
            });
            app.refresh();
            dirty = true;
        }
        let selected = app.selected_version().map(|v| v.id.clone());
        if focus.get() != selected {
            focus.set(selected);
        }
        if dirty {
            term.draw(|f| view::draw(&app, f))?;
        }
    }
    Ok(rung_core::exit::OK)
}
