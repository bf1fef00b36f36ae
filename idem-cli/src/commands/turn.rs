//! `idem turn ID` (and `idem list --turn ID`): one turn's records, in the order it claimed them.

use idem_tools_runtime::Store;
use idem_tools_runtime::store::{Record, RecordState};
use serde_json::Value;

use crate::error::CliError;
use crate::output::{record_json, table};
use crate::state::State;
use crate::when::{relative, rfc3339};

/// What a record says the action came to: `ok`, `err`, `interrupted`, `not replayable`,
/// `in progress` (or `unreadable`).
pub fn outcome(record: &Record) -> &'static str {
    match State::of(record) {
        State::InProgress => "in progress",
        State::Completed => "ok",
        State::Failed => "err",
        State::Interrupted => "interrupted",
        State::NotReplayable => "not replayable",
        State::Unreadable => "unreadable",
    }
}

/// Said under every table: a call that failed gave its key back, and the stores keep no record
/// of it to list.
const GIVEN_BACK: &str = "note: a call that failed and gave its key back (an error, a panic, \
                          a cancelled call) leaves no record, so it is not listed; its \
                          attempts still count against the turn's budget, and its tool's logs \
                          carry its key";

/// `idem turn ID`: a table of up to `limit` live records of turn `turn` in `namespace`, oldest
/// claim first (a note on stderr when there may be more), or a JSON array (each record as
/// `list --json` shows it, with `turn` and `outcome`).
///
/// Every record of the turn is shown, whatever claimed it: a tool's call, or later a model
/// step recorded under a tool name of its own.
///
/// # Errors
/// A store error.
pub async fn turn(
    store: &dyn Store,
    namespace: &str,
    turn: &str,
    limit: usize,
    json: bool,
    now: u64,
) -> Result<String, CliError> {
    let mut records = store
        .list_turn(namespace, turn, limit.saturating_add(1))
        .await?;
    let more = records.len() > limit;
    records.truncate(limit);
    if json {
        let items: Vec<Value> = records
            .iter()
            .map(|r| {
                let mut item = record_json(r);
                if let Value::Object(fields) = &mut item {
                    fields.insert("turn".to_owned(), Value::from(r.turn.clone()));
                    fields.insert("outcome".to_owned(), Value::from(outcome(r)));
                }
                item
            })
            .collect();
        return Ok(super::json_text(&Value::Array(items)));
    }
    if more {
        eprintln!(
            "showing the first {} records of the turn; pass a larger --limit to see more",
            records.len()
        );
    }
    // What the table cannot show: the question it answers is often "did it happen?".
    eprintln!("{GIVEN_BACK}");
    if records.is_empty() {
        return Ok(format!(
            "no live records of turn {turn:?} in namespace {namespace:?}\n"
        ));
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            let state = match r.state {
                RecordState::InProgress => "in_progress",
                RecordState::Completed => "completed",
            };
            vec![
                r.key.short().to_hex(),
                r.tool.clone(),
                state.to_owned(),
                outcome(r).to_owned(),
                r.attempts.to_string(),
                rfc3339(r.created_at_ms),
                format!(
                    "{} ({})",
                    rfc3339(r.expires_at_ms),
                    relative(r.expires_at_ms, now)
                ),
            ]
        })
        .collect();
    Ok(table(
        &[
            "KEY", "TOOL", "STATE", "OUTCOME", "ATTEMPTS", "CLAIMED", "EXPIRES",
        ],
        &rows,
    ))
}
