//! Asking the operator before a destructive action.

use std::io::{self, BufRead, IsTerminal, Write};

/// Whether a person can answer on stdin.
pub fn stdin_is_terminal() -> bool {
    io::stdin().is_terminal()
}

/// Writes `question` and ` [y/N] ` to `output`, reads one line from `input`: true only for
/// `y` or `yes` (any case). End of input counts as no.
///
/// # Errors
/// If writing the question or reading the answer fails.
pub fn ask(question: &str, input: &mut impl BufRead, output: &mut impl Write) -> io::Result<bool> {
    write!(output, "{question} [y/N] ")?;
    output.flush()?;
    let mut answer = String::new();
    input.read_line(&mut answer)?;
    let answer = answer.trim().to_ascii_lowercase();
    Ok(answer == "y" || answer == "yes")
}

#[cfg(test)]
mod tests {
    use super::ask;

    fn answer(typed: &str) -> (bool, String) {
        let mut shown = Vec::new();
        let yes = ask("remove it?", &mut typed.as_bytes(), &mut shown).expect("in memory");
        (yes, String::from_utf8_lossy(&shown).into_owned())
    }

    #[test]
    fn only_yes_confirms() {
        assert_eq!(answer("y\n"), (true, "remove it? [y/N] ".to_owned()));
        assert!(answer("YES\n").0);
        assert!(answer(" yes \n").0);
        for no in ["\n", "n\n", "no\n", "", "yess\n", "sure\n"] {
            assert!(!answer(no).0, "{no:?}");
        }
    }
}
