//! A restart does not repeat a charge: run this twice.
//!
//! ```console
//! $ cargo run --example durable --features sqlite    # charges the card, records the result
//! $ cargo run --example durable --features sqlite    # a "restarted orchestrator": replays it
//! ```
//!
//! The first run charges the card (a line in `charges.log`) and records the result in an SQLite
//! file; the second run is a new process that repeats the same turn from the top, as an
//! orchestrator does after a crash, and gets the first receipt back without charging again.
//! State lives in `$IDEM_DURABLE_DIR` (default: `idem-durable-example` in the system's temporary
//! directory, never in the checkout); pass `--reset` to start over.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use idem_tools::SqliteStore;
use idem_tools::{Turn, idempotent};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Receipt {
    charge_id: String,
    cents: u64,
}

fn state_dir() -> PathBuf {
    std::env::var_os("IDEM_DURABLE_DIR").map_or_else(
        || std::env::temp_dir().join("idem-durable-example"),
        PathBuf::from,
    )
}

fn charges_made(log: &Path) -> usize {
    std::fs::read_to_string(log).map_or(0, |text| text.lines().count())
}

/// Charges a card: the side effect is a line appended to `charges.log`.
#[idempotent]
async fn charge_card(customer: String, cents: u64) -> Result<Receipt, idem_tools::Error> {
    let log = state_dir().join("charges.log");
    let charge_id = format!("ch_{}", charges_made(&log) + 1);
    let line = format!("{charge_id} {customer} {cents}\n");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut file| std::io::Write::write_all(&mut file, line.as_bytes()))
        .map_err(|e| idem_tools::Error::Config(format!("cannot write {}: {e}", log.display())))?;
    println!("  -> payment provider: charged {customer} {cents} cents ({charge_id})");
    Ok(Receipt { charge_id, cents })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = state_dir();
    if std::env::args().any(|arg| arg == "--reset") {
        let _ = std::fs::remove_dir_all(&dir);
        println!("reset {}", dir.display());
        return Ok(());
    }
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("idem.db");
    let restarted = db.exists();
    idem_tools::set_default_store(Arc::new(SqliteStore::open(&db)?))?;

    println!(
        "{} run: the orchestrator starts turn order-1001/turn-1 from the top (state in {})",
        if restarted { "second" } else { "first" },
        dir.display()
    );
    let receipt = Turn::new("order-1001/turn-1")
        .scope(charge_card("ada".to_owned(), 4200))
        .await?;
    let charges = charges_made(&dir.join("charges.log"));
    println!(
        "receipt {} for {} cents; charges made in all runs: {charges}",
        receipt.charge_id, receipt.cents
    );
    if charges != 1 {
        return Err(format!("expected exactly one charge, found {charges}").into());
    }
    if restarted {
        println!(
            "the restarted run replayed the first receipt from {}",
            db.display()
        );
    } else {
        println!("run it again: the new process will replay instead of charging twice");
    }
    Ok(())
}
