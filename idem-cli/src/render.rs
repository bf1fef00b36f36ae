//! How a record's encoded result is shown to a person.
//!
//! This is the only place that knows how results are encoded. Today the engine records JSON in
//! a one-key envelope (`{"ok": …}` or `{"err": …}`). MERGE NOTE: when the binary record codec
//! lands, `render` becomes a call to `idem_runtime::replay::render(bytes)`, keeping the hex
//! fallback below for bytes it cannot decode.

/// The result `bytes` as text: the JSON envelope pretty-printed, anything else as `hex:` and
/// the bytes in hex.
pub fn render(bytes: &[u8]) -> String {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(value) if is_envelope(&value) => {
            serde_json::to_string_pretty(&value).unwrap_or_else(|_| hex(bytes))
        }
        _ => hex(bytes),
    }
}

/// Whether `value` is `{"ok": …}` or `{"err": …}`.
fn is_envelope(value: &serde_json::Value) -> bool {
    value
        .as_object()
        .is_some_and(|map| map.len() == 1 && (map.contains_key("ok") || map.contains_key("err")))
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(4 + 2 * bytes.len());
    out.push_str("hex:");
    for byte in bytes {
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::render;

    #[test]
    fn envelopes_are_pretty_printed() {
        assert_eq!(
            render(br#"{"ok":{"id":"m-1","n":2}}"#),
            "{\n  \"ok\": {\n    \"id\": \"m-1\",\n    \"n\": 2\n  }\n}"
        );
        assert_eq!(render(br#"{"err":"boom"}"#), "{\n  \"err\": \"boom\"\n}");
    }

    #[test]
    fn anything_else_is_hex() {
        assert_eq!(render(&[0x00, 0xff, 0x10]), "hex:00ff10");
        assert_eq!(render(b"[1,2]"), "hex:5b312c325d");
        assert_eq!(
            render(br#"{"ok":1,"err":2}"#),
            format!("hex:{}", "7b226f6b223a312c22657272223a327d")
        );
        assert_eq!(render(b""), "hex:");
    }
}
