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
    fn a_record_rendered_is_annotated_json() {
        let mut bytes = Vec::new();
        idem_tools_runtime::replay::bench::encode(&("m-1", 2u8), &mut bytes).expect("encode");
        assert_eq!(render(&bytes), "Ok([\n  \"m-1\",\n  2\n])");
    }

    #[test]
    fn anything_else_is_hex() {
        assert_eq!(render(&[0x00, 0xff, 0x10]), "hex:00ff10");
        assert_eq!(render(b""), "hex:");
    }
}
