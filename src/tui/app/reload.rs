//! Reloading what the panes show: the whole workspace (a file changed), one version (a job of
//! it ended), or what another process recorded in the history (every tick asks).

use anyhow::Result;
use rung_core::workspace::Workspace;

use super::*;

impl App {
    /// Reads the workspace and the history again.
    pub fn refresh(&mut self) {
        let ws = match Workspace::open(&self.root) {
            Ok(ws) => Ok(ws),
            // Broken again: keep what is shown, with the errors in the compile-errors pane.
            Err(e) if e.is_fixable() => {
                self.workspace_diagnostics = e.diagnostics(&self.root);
                return;
            }
            Err(e) => Err(anyhow::Error::from(e)),
        };
        let loaded = ws.and_then(|ws| {
            self.load(&ws)?;
            self.ws = Some(ws);
            Ok(())
        });
        if let Err(e) = loaded {
            self.message = Some(format!("{e:#}"));
        }
    }

    /// Reloads one version's results (a job of it ended): its view and the timing, without a new
    /// scan of the workspace. Anything else (a version the last scan did not see) reloads all.
    pub fn refresh_version(&mut self, id: &str) {
        let (Some(ws), Some(row)) = (self.ws.as_ref(), self.versions.iter().position(|v| v.id == id)) else {
            return self.refresh();
        };
        let Some(v) = ws.version(id).filter(|v| v.path == self.versions[row].path) else { return self.refresh() };
        let reloaded = version_view(ws, &self.store, v).and_then(|view| {
            self.versions[row] = view;
            self.timing = timing(&mut self.timing_rows, &self.store, &self.versions)?;
            Ok(())
        });
        match reloaded {
            Ok(()) => self.clamp_diagnostic(),
            Err(e) => self.message = Some(format!("{e:#}")),
        }
    }

    pub(super) fn load(&mut self, ws: &Workspace) -> Result<()> {
        let selected_id = self.selected_version().map(|v| v.id.clone());
        self.problem = ws.spec.as_ref().map_or_else(|| format!("{:?} problem", ws.format), |s| s.name.clone());
        self.workspace_diagnostics = ws.diagnostics.clone();
        self.versions = ws.versions.iter().map(|v| version_view(ws, &self.store, v)).collect::<Result<Vec<_>>>()?;
        self.timing = timing(&mut self.timing_rows, &self.store, &self.versions)?;
        let listed = |id: &String| self.versions.iter().position(|v| &v.id == id);
        let wanted = self.select_when_listed.as_ref().and_then(listed);
        if wanted.is_some() {
            self.select_when_listed = None;
        }
        self.selected =
            selected_id.as_ref().and_then(listed).unwrap_or(self.selected).min(self.versions.len().saturating_sub(1));
        if let Some(row) = wanted {
            self.select(row);
        }
        self.clamp_diagnostic();
        Ok(())
    }

    /// What other processes (a `rung check` in another terminal, an agent over MCP) and this
    /// process's own threads recorded since the last look: each version with new results, or
    /// whose review changed, is reloaded. Cheap when nothing changed (one pragma), so every tick
    /// asks. Returns whether anything was reloaded.
    pub fn follow_store(&mut self) -> bool {
        let Ok(now) = self.store.data_version() else { return false };
        if now == self.data_version {
            return false;
        }
        self.data_version = now;
        let Ok((mut changed, newest)) = self.store.versions_with_results_after(self.seen_result) else { return false };
        self.seen_result = newest;
        if let Ok(rows) = self.store.versions() {
            for row in rows {
                let shown = self.versions.iter().find(|v| v.id == row.id);
                if shown.is_some_and(|v| v.status != Some(row.status) || v.reason != row.reason) {
                    changed.push(row.id);
                }
            }
        }
        changed.sort();
        changed.dedup();
        changed.retain(|id| self.versions.iter().any(|v| &v.id == id));
        for id in &changed {
            self.refresh_version(id);
        }
        !changed.is_empty()
    }
}
