//! The keys the README's `idem` CLI lines name are the ones its first example records.

/// The README's first example's `send_message`, as written there.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Receipt {
    id: u64,
}

#[idem_tools::idempotent(ttl = "1h")]
async fn send_message(to: String, text: String) -> Result<Receipt, idem_tools::Error> {
    let _ = (to, text);
    Ok(Receipt { id: 42 })
}

/// The README's `idem` CLI lines name the key its first example's `send_message` call records
/// (in turn `conv-42/turn-7`): a reader who ran the example on a SQLite file finds it there.
#[tokio::test]
async fn the_readme_names_its_first_examples_key() {
    use idem_tools::store::Store;
    let store = std::sync::Arc::new(idem_tools::MemoryStore::new());
    idem_tools::Turn::new("conv-42/turn-7")
        .with_store(store.clone())
        .scope(send_message(
            "ada".into(),
            "results for refund policy".into(),
        ))
        .await
        .expect("the call");
    let records = store.list(None, 10).await.expect("list");
    let [record] = records.as_slice() else {
        panic!("one record: {records:?}")
    };
    let hex = record.key.to_hex();
    let readme = include_str!("../README.md");
    assert!(
        readme.contains(&format!("show {}", &hex[..12]))
            && readme.contains(&format!("remove {}", &hex[..4])),
        "the README's CLI lines should name {}",
        &hex[..12]
    );
}
