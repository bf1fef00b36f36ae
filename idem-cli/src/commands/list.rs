//! `idem list`: live records, newest first.

use idem_tools_runtime::Store;
use idem_tools_runtime::store::Record;
use serde_json::Value;

use crate::error::CliError;
use crate::output::{namespace_label, record_json, table};
use crate::state::State;
use crate::when::{relative, rfc3339};

/// Which records `list` shows.
#[derive(Debug, Clone, Default)]
pub struct Filter<'a> {
    /// Only this namespace.
    pub namespace: Option<&'a str>,
    /// Only this tool.
    pub tool: Option<&'a str>,
    /// Only this state.
    pub state: Option<State>,
}

impl Filter<'_> {
    fn accepts(&self, record: &Record) -> bool {
        self.state.is_none_or(|state| State::of(record) == state)
            && self.tool.is_none_or(|tool| record.tool == tool)
    }
}

/// Every live record that passes `filter`, newest first.
///
/// # Errors
/// A store error.
pub async fn matching(store: &dyn Store, filter: &Filter<'_>) -> Result<Vec<Record>, CliError> {
    let mut records: Vec<Record> = store
        .list(filter.namespace, usize::MAX)
        .await?
        .into_iter()
        .filter(|r| filter.accepts(r))
        .collect();
    records.sort_by(|a, b| {
        b.created_at_ms
            .cmp(&a.created_at_ms)
            .then_with(|| a.key.cmp(&b.key))
    });
    Ok(records)
}

/// `idem list`: a table of up to `limit` records (a note on stderr when more matched), or a
/// JSON array.
///
/// # Errors
/// A store error.
pub async fn list(
    store: &dyn Store,
    filter: &Filter<'_>,
    limit: usize,
    json: bool,
    now: u64,
) -> Result<String, CliError> {
    let mut records = matching(store, filter).await?;
    let total = records.len();
    records.truncate(limit);
    if json {
        let items: Vec<Value> = records.iter().map(record_json).collect();
        return Ok(super::json_text(&Value::Array(items)));
    }
    if total > records.len() {
        eprintln!(
            "showing the newest {} of {total} records; pass --limit {total} to see them all",
            records.len()
        );
    }
    if records.is_empty() {
        return Ok("no live records match\n".to_owned());
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.key.short().to_hex(),
                namespace_label(&r.namespace),
                r.tool.clone(),
                State::of(r).as_str().to_owned(),
                rfc3339(r.created_at_ms),
                relative(r.expires_at_ms, now),
            ]
        })
        .collect();
    Ok(table(
        &["KEY", "NAMESPACE", "TOOL", "STATE", "CREATED", "EXPIRES"],
        &rows,
    ))
}
