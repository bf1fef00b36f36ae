use idem::{Turn, idempotent};
use std::sync::atomic::{AtomicUsize, Ordering};

static SENT: AtomicUsize = AtomicUsize::new(0);

#[idempotent]
async fn send(to: String, (a, b): (u32, u32)) -> Result<usize, idem::Error> {
    let _ = (a, b, to);
    Ok(SENT.fetch_add(1, Ordering::SeqCst) + 1)
}

#[tokio::test]
async fn smoke() {
    Turn::new("t")
        .scope(async {
            assert_eq!(send("a".into(), (1, 2)).await.unwrap(), 1);
            assert_eq!(send("a".into(), (1, 2)).await.unwrap(), 1);
            assert_eq!(send("b".into(), (1, 2)).await.unwrap(), 2);
        })
        .await;
    assert!(matches!(
        send("a".into(), (1, 2)).await,
        Err(idem::Error::NoTurn { .. })
    ));
}
