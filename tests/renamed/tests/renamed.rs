//! The tools of a crate that renames `idem-tools` run, and replay.

use std::sync::Arc;

use idem::{MemoryStore, Turn};
use idem_renamed_test::{Desk, TOOLS, book};

#[tokio::test]
async fn tools_of_a_crate_that_renames_idem_run_and_replay() {
    let turn = Turn::new("renamed").with_store(Arc::new(MemoryStore::new()));
    let desk = Desk { id: 7 };
    turn.clone()
        .scope(async {
            assert_eq!(book(3).await.unwrap(), 3);
            assert_eq!(book(3).await.unwrap(), 3);
            assert_eq!(desk.reserve(2).await.unwrap(), 702);
            assert_eq!(desk.label("a").await.unwrap(), "7:a");
        })
        .await;
    assert_eq!((turn.stats().executed, turn.stats().replayed), (3, 1));
    let names: Vec<&str> = TOOLS.iter().map(|tool| tool.name).collect();
    assert_eq!(names, ["book", "search", "Desk__reserve", "Desk__label"]);
}
