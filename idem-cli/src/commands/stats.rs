//! `idem stats` (counts by state and tool) and `idem purge` (delete expired records).

use std::collections::BTreeMap;

use idem_tools_runtime::Store;
use serde_json::json;

use super::list::{Filter, matching};
use crate::error::CliError;
use crate::open::Backend;
use crate::output::table;
use crate::state::State;

/// Live records counted by state, in the order of [`State::ALL`].
#[derive(Debug, Default, Clone, Copy)]
struct Counts([u64; State::ALL.len()]);

impl Counts {
    fn add(&mut self, state: State) {
        if let Some(i) = State::ALL.iter().position(|s| *s == state) {
            self.0[i] += 1;
        }
    }

    fn total(self) -> u64 {
        self.0.iter().sum()
    }

    fn json(self) -> serde_json::Value {
        let mut counts: serde_json::Map<String, serde_json::Value> = State::ALL
            .iter()
            .zip(self.0)
            .map(|(state, n)| (state.as_str().to_owned(), n.into()))
            .collect();
        counts.insert("total".to_owned(), self.total().into());
        serde_json::Value::Object(counts)
    }

    fn row(self, label: &str) -> Vec<String> {
        std::iter::once(label.to_owned())
            .chain(self.0.iter().map(u64::to_string))
            .chain(std::iter::once(self.total().to_string()))
            .collect()
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
        let state = State::of(&record);
        all.add(state);
        by_tool.entry(record.tool).or_default().add(state);
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
    let headers: Vec<String> = State::ALL
        .iter()
        .map(|s| s.as_str().to_ascii_uppercase())
        .collect();
    let headers: Vec<&str> = std::iter::once("TOOL")
        .chain(headers.iter().map(String::as_str))
        .chain(std::iter::once("TOTAL"))
        .collect();
    Ok(table(&headers, &rows))
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
