//! `render`: records as text for operators.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{Bits, TOOL, ok_record};
use crate::Error;
use crate::replay::{OkAndErr, ResultCodec, encode_interrupted, encode_unreplayable, render};

#[derive(Debug, Clone, Serialize, Deserialize)]
enum Status {
    Queued,
    Sent { at: u64 },
    Retry(u8, char),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Report {
    ratio: Bits,
    note: Option<Option<String>>,
    plain: Option<u8>,
    grid: BTreeMap<(u8, u8), u32>,
    #[serde(with = "serde_bytes")]
    digest: Vec<u8>,
    statuses: Vec<Status>,
    unit: (),
    big: u128,
}

#[test]
fn a_record_renders_as_annotated_json() {
    let report = Report {
        ratio: Bits(f64::NAN),
        note: Some(None),
        plain: Some(3),
        grid: [((0, 1), 7)].into(),
        digest: vec![0x00, 0xff],
        statuses: vec![
            Status::Queued,
            Status::Sent { at: 17 },
            Status::Retry(2, 'x'),
        ],
        unit: (),
        big: u128::MAX,
    };
    let expected = r#"Ok({
  "ratio": NaN,
  "note": Some(null),
  "plain": 3,
  "grid": {
    [0, 1]: 7
  },
  "digest": hex"00ff",
  "statuses": [
    Queued,
    Sent {
      "at": 17
    },
    Retry(
      2,
      'x'
    )
  ],
  "unit": (),
  "big": 340282366920938463463374607431768211455
})"#;
    assert_eq!(render(&ok_record(report)).expect("render"), expected);
}

#[test]
fn floats_strings_and_keys_render_as_written() {
    let floats = vec![
        Bits(-0.0),
        Bits(f64::INFINITY),
        Bits(f64::NEG_INFINITY),
        Bits(1.0),
    ];
    assert_eq!(
        render(&ok_record(floats)).expect("render"),
        "Ok([\n  -0.0,\n  inf,\n  -inf,\n  1.0\n])"
    );
    let payload = Bits(f64::from_bits(0x7ff8_0000_0000_0001));
    assert_eq!(
        render(&ok_record(payload)).expect("render"),
        "Ok(NaN(bits 0x7ff8000000000001))"
    );
    assert_eq!(
        render(&ok_record("a \"quote\"\n".to_owned())).expect("render"),
        r#"Ok("a \"quote\"\n")"#
    );
    let by_number: BTreeMap<i32, Vec<u8>> = [(-1, vec![]), (2, vec![1])].into();
    assert_eq!(
        render(&ok_record(by_number)).expect("render"),
        "Ok({\n  -1: [],\n  2: [\n    1\n  ]\n})"
    );
    // A key that would span lines is folded onto one.
    let by_pair: BTreeMap<(Vec<u8>, String), ()> = [((vec![1, 2], "k".to_owned()), ())].into();
    assert_eq!(
        render(&ok_record(by_pair)).expect("render"),
        "Ok({\n  [[1, 2], \"k\"]: ()\n})"
    );
}

#[test]
fn errors_and_markers_render_with_their_kind() {
    let result: Result<u8, String> = Err("denied".to_owned());
    let Some(Ok(bytes)) = <OkAndErr as ResultCodec<u8, String>>::encode(TOOL, &result) else {
        panic!("encode");
    };
    assert_eq!(render(&bytes).expect("render"), r#"Err("denied")"#);
    assert_eq!(
        render(&encode_unreplayable("send", "lost data")).expect("render"),
        r#"NotReplayable { tool: "send", reason: "lost data" }"#
    );
    assert_eq!(
        render(&encode_interrupted("send")).expect("render"),
        r#"Interrupted { tool: "send" }"#
    );
    let json = render(br#"{"ok":{"id":1}}"#);
    assert!(
        matches!(&json, Err(Error::UnreadableRecord { message }) if message.contains("JSON record")),
        "{json:?}"
    );
    let bad = render(&[0x7f, 0, 0]);
    assert!(
        matches!(bad, Err(Error::UnreadableRecord { .. })),
        "{bad:?}"
    );
}
