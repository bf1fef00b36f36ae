use idem_tools::{Error, idempotent};

mod chess {
    #[derive(serde::Serialize, serde::Deserialize, Clone, Copy)]
    pub enum Turn {
        White,
        Black,
    }
}

// A type named `Turn` is taken as idem's: the error says so, at the parameter's type.
#[idempotent]
async fn play(turn: chess::Turn, to: String) -> Result<u32, Error> {
    let _ = (turn, to);
    Ok(1)
}

// Named `_turn` too (a binding of the macro's own).
#[idempotent]
async fn resign(_turn: &chess::Turn, game: u64) -> Result<u64, Error> {
    Ok(game)
}

fn main() {}
