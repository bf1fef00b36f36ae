//! How a record's encoded result is shown to a person: `idem_tools_runtime::replay::render`, which
//! prints the record as annotated JSON (`NaN`, `Some(…)`, `hex"…"`, non-string keys), with a
//! `hex:` fallback for bytes that are not a record (corrupt, or from a newer idem).

/// The result `bytes` as text: the record rendered, anything unreadable as `hex:` and the
/// bytes in hex.
pub fn render(bytes: &[u8]) -> String {
    idem_tools_runtime::replay::render(bytes).unwrap_or_else(|_| hex(bytes))
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
    fn records_written_as_json_before_the_binary_codec_still_render() {
        let shown = render(br#"{"ok":{"id":"m-1","n":2}}"#);
        assert!(shown.contains("\"m-1\""), "{shown}");
    }

    #[test]
    fn anything_else_is_hex() {
        assert_eq!(render(&[0x00, 0xff, 0x10]), "hex:00ff10");
        assert_eq!(render(b""), "hex:");
    }
}
