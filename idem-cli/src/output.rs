//! Output shapes shared by the commands: aligned tables, and records as JSON.

use idem_tools_runtime::store::Record;
use serde_json::{Value, json};

use crate::render::render;
use crate::state::{State, marker_json};
use crate::when::rfc3339;

/// A namespace as shown in tables: the empty namespace as `""`.
pub fn namespace_label(namespace: &str) -> String {
    if namespace.is_empty() {
        "\"\"".to_owned()
    } else {
        namespace.to_owned()
    }
}

/// A record with stable field names for scripts: `namespace`, `key`, `tool`, `state` (as
/// `--state` spells it), `attempts`, `fingerprint`, `created_at`/`expires_at` (RFC 3339) and
/// `created_at_ms`/`expires_at_ms`, `result` (the text `show` prints for an `Ok` or `Err`,
/// `hex:…` when unreadable; `null` while in progress and for a marker) and `marker` (`{"kind":
/// "interrupted"}`, `{"kind": "not-replayable", "reason": "…"}`, else `null`).
pub fn record_json(record: &Record) -> Value {
    let state = State::of(record);
    let result = match state {
        State::Completed | State::Failed | State::Unreadable => record.result.as_deref(),
        State::InProgress | State::Interrupted | State::NotReplayable => None,
    };
    json!({
        "namespace": record.namespace,
        "key": record.key.to_hex(),
        "tool": record.tool,
        "state": state.as_str(),
        "attempts": record.attempts,
        "fingerprint": record.fingerprint.to_hex(),
        "created_at": rfc3339(record.created_at_ms),
        "created_at_ms": record.created_at_ms,
        "expires_at": rfc3339(record.expires_at_ms),
        "expires_at_ms": record.expires_at_ms,
        "result": result.map(render),
        "marker": marker_json(record),
    })
}

/// `rows` under `headers`, columns separated by two spaces and padded to their widest cell
/// (the last column is not padded).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, (cell, width)) in row.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(cell);
                let pad = width.saturating_sub(cell.chars().count()) + 2;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_their_columns() {
        let rows = vec![
            vec!["a".to_owned(), "long cell".to_owned(), "x".to_owned()],
            vec!["bbbb".to_owned(), "c".to_owned(), "y".to_owned()],
        ];
        assert_eq!(
            table(&["K", "V", "LAST"], &rows),
            "K     V          LAST\na     long cell  x\nbbbb  c          y\n"
        );
    }

    #[test]
    fn the_empty_namespace_is_visible() {
        assert_eq!(namespace_label(""), "\"\"");
        assert_eq!(namespace_label("tenant-1"), "tenant-1");
    }
}
