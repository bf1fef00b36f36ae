//! `idem stats` (counts by state and tool) and `idem purge` (delete expired records).

use std::collections::BTreeMap;

use idem_tools_runtime::Store;
use idem_tools_runtime::store::RecordState;
use serde_json::json;

use super::list::{Filter, matching};
use crate::error::CliError;
use crate::open::Backend;
use crate::output::table;

/// Live records counted by state.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    in_progress: u64,
    completed: u64,
}

impl Counts {
    fn add(&mut self, state: RecordState) {
        match state {
            RecordState::InProgress => self.in_progress += 1,
            RecordState::Completed => self.completed += 1,
        }
    }

    fn total(self) -> u64 {
        self.in_progress + self.completed
    }

    fn json(self) -> serde_json::Value {
        json!({
            "in-progress": self.in_progress,
            "completed": self.completed,
            "total": self.total(),
        })
    }

    fn row(self, label: &str) -> Vec<String> {
        vec![
            label.to_owned(),
            self.in_progress.to_string(),
            self.completed.to_string(),
            self.total().to_string(),
        ]
    }
}

/// `idem stats`: live records by state and by tool, of one namespace or all.
///
/// # Errors
/// A store error.
pub async fn stats(
    store: &dyn Store,
    namespace: Option<&str>,
    json: bool,
) -> Result<String, CliError> {
    let filter = Filter {
        namespace,
        ..Filter::default()
    };
    let mut all = Counts::default();
    let mut by_tool: BTreeMap<String, Counts> = BTreeMap::new();
    for record in matching(store, &filter).await? {
        all.add(record.state);
        by_tool.entry(record.tool).or_default().add(record.state);
    }
    if json {
        let tools: serde_json::Map<String, serde_json::Value> = by_tool
            .iter()
            .map(|(tool, counts)| (tool.clone(), counts.json()))
            .collect();
        let value = json!({ "by_state": all.json(), "by_tool": tools });
        return Ok(super::json_text(&value));
    }
    let mut rows: Vec<Vec<String>> = by_tool
        .iter()
        .map(|(tool, counts)| counts.row(tool))
        .collect();
    rows.push(all.row("(all tools)"));
    Ok(table(&["TOOL", "IN-PROGRESS", "COMPLETED", "TOTAL"], &rows))
}

/// `idem purge`: deletes expired records and says how many.
///
/// # Errors
/// A store error.
pub async fn purge(store: &dyn Store, backend: Backend, json: bool) -> Result<String, CliError> {
    let purged = store.purge_expired().await?;
    if json {
        return Ok(super::json_text(&json!({ "purged": purged })));
    }
    let noun = if purged == 1 { "record" } else { "records" };
    let note = match backend {
        Backend::Redis => " (Redis deletes expired records by itself)",
        Backend::Sqlite | Backend::Postgres => "",
    };
    Ok(format!("purged {purged} expired {noun}{note}\n"))
}
