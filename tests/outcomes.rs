//! Every call of an annotated tool is exactly one outcome, even one refused before it reaches
//! the engine.

use idem_tools::{Error, idempotent};

#[idempotent]
async fn charge_card(cents: u64) -> Result<u64, Error> {
    Ok(cents)
}

#[tokio::test]
async fn a_call_outside_a_turn_is_refused_and_counted() {
    let before = idem_tools::stats().config_error;
    let refused = charge_card(500).await;
    assert!(
        matches!(
            refused,
            Err(Error::NoTurn {
                tool: "charge_card"
            })
        ),
        "{refused:?}"
    );
    // This test is alone in its binary: the counter moved by this call only.
    assert_eq!(
        idem_tools::stats().config_error,
        before + 1,
        "a refused call must still be one outcome"
    );
}
