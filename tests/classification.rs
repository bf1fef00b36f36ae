//! `#[read_only]` and the `tools![]` catalog: the compile-time classification of tools.

use std::sync::Arc;

use idem_tools::{Error, MemoryStore, ToolInfo, ToolKind, Turn, idempotent, read_only};

#[read_only]
async fn search_docs(query: &str) -> Vec<String> {
    vec![format!("result for {query}")]
}

/// Sync tools can be read-only too; the body is untouched.
#[read_only]
pub fn word_count(text: &str) -> usize {
    text.split_whitespace().count()
}

#[idempotent(ttl = "2h", budget = 3, version = 1)]
async fn send_email(to: String) -> Result<(), Error> {
    let _ = to;
    Ok(())
}

mod billing {
    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    pub struct Declined(pub String);

    impl From<idem_tools::Error> for Declined {
        fn from(error: idem_tools::Error) -> Self {
            Declined(error.to_string())
        }
    }

    #[idem_tools::idempotent(name = "charge_card", cache_errors)]
    pub async fn charge(cents: u64) -> Result<u64, Declined> {
        Ok(cents)
    }

    #[derive(Clone)]
    pub struct Ledger;

    #[idem_tools::tool_impl(same_service)]
    impl Ledger {
        #[idem_tools::read_only]
        pub fn balance(&self) -> u64 {
            0
        }

        #[idem_tools::idempotent]
        pub async fn append(&self, line: String) -> Result<usize, idem_tools::Error> {
            Ok(line.len())
        }
    }
}

const TOOLS: &[ToolInfo] = idem_tools::tools![
    send_email,
    search_docs,
    word_count,
    billing::charge,
    billing::Ledger::balance,
    billing::Ledger::append,
];

#[test]
fn the_catalog_lists_every_tool_with_its_classification() {
    let names: Vec<_> = TOOLS.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "send_email",
            "search_docs",
            "word_count",
            "charge_card",
            "Ledger__balance",
            "Ledger__append"
        ]
    );
    let kinds: Vec<_> = TOOLS.iter().map(|t| t.kind).collect();
    use ToolKind::{Idempotent, ReadOnly};
    assert_eq!(
        kinds,
        [
            Idempotent, ReadOnly, ReadOnly, Idempotent, ReadOnly, Idempotent
        ]
    );
    let send = TOOLS[0];
    assert_eq!(send.ttl, Some(std::time::Duration::from_secs(7200)));
    assert_eq!(
        (send.budget, send.version, send.cache_errors),
        (Some(3), 1, false)
    );
    assert!(TOOLS[3].cache_errors);
    // MCP annotations.
    for tool in TOOLS {
        let read_only = tool.kind == ReadOnly;
        assert_eq!(tool.read_only_hint(), read_only);
        assert_eq!(tool.destructive_hint(), !read_only);
        assert!(tool.idempotent_hint());
    }
}

#[test]
fn the_catalog_works_in_a_let_too() {
    let tools = idem_tools::tools![search_docs];
    assert_eq!(tools, [ToolInfo::read_only("search_docs")]);
    let none: &[ToolInfo] = idem_tools::tools![];
    assert!(none.is_empty());
}

#[tokio::test]
async fn read_only_tools_touch_no_store_and_need_no_turn() {
    // Outside of any turn: a read-only tool just runs.
    assert_eq!(search_docs("x").await.len(), 1);
    let store = Arc::new(MemoryStore::new());
    let turn = Turn::new("reads").with_store(store.clone());
    turn.clone()
        .scope(async {
            for _ in 0..10 {
                search_docs("rust").await;
            }
        })
        .await;
    assert_eq!(store.len(), 0);
    assert_eq!(turn.stats().total(), 0);
    assert_eq!(word_count("a b c"), 3);
    assert_eq!(billing::Ledger.balance(), 0);
    assert_eq!(
        Turn::new("x")
            .scope(billing::Ledger.append("abc".into()))
            .await
            .unwrap(),
        3
    );
    assert_eq!(Turn::new("x").scope(billing::charge(5)).await.unwrap(), 5);
    Turn::new("x")
        .scope(send_email("ada".into()))
        .await
        .unwrap();
}
