//! What a model reads for each [`Error`]: [`Error::model_text`], [`Error::is_for_model`] and
//! [`Error::code`].
//!
//! An idem error has two readers. Its `Display` text is for the developer: it names the Rust
//! API to change (`Turn::with_max_calls`, a tool's `lease`, …) and the engine logs it with
//! every failed call. A model that called the tool reads [`Error::model_text`] instead: what
//! happened to the action it asked for and what to do next, in words that name no Rust API,
//! no key and no store. An integration gives the model this text, never the `Display` one
//! (over MCP, `From<Error> for rmcp::ErrorData`; in rig's agent loop, `idem_tools::rig`).

use crate::error::{Earlier, Error, Mismatch, actions, times};

/// What a model is told to do about a failure of the application rather than of its call.
const UNAVAILABLE: &str = "The problem is in the application, not in your call: do not call \
                           it again; tell the user that this action is unavailable right now.";

impl Error {
    /// A short, stable name of the error's kind (`"budget_exhausted"`, `"store"`, …), for
    /// logs, metrics and error codes.
    ///
    /// ```
    /// # extern crate idem_tools_runtime as idem_tools;
    /// assert_eq!(idem_tools::Error::NoTurn { tool: "send" }.code(), "no_turn");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            Error::NoTurn { .. } => "no_turn",
            Error::BudgetExhausted { .. } => "budget_exhausted",
            Error::TurnBudgetExhausted { .. } => "turn_budget_exhausted",
            Error::ToolBudgetExhausted { .. } => "tool_budget_exhausted",
            Error::PayloadMismatch { .. } => "payload_mismatch",
            Error::InFlight { .. } => "in_flight",
            Error::Decode { .. } => "decode",
            Error::Encode { .. } => "encode",
            Error::Store { .. } => "store",
            Error::Reentrant { .. } => "reentrant",
            Error::Interrupted { .. } => "interrupted",
            Error::NotReplayable { .. } => "not_replayable",
            Error::LeaseLost { .. } => "lease_lost",
            Error::CorruptRecord { .. } => "corrupt_record",
            Error::UnreadableRecord { .. } => "unreadable_record",
            Error::DuplicateTool { .. } => "duplicate_tool",
            Error::NameClash { .. } => "name_clash",
            Error::SharedAcrossTypes { .. } => "shared_across_types",
            Error::TransactionEnded { .. } => "transaction_ended",
            Error::CommitFailed { .. } => "commit_failed",
            Error::ModelStepDiverged { .. } => "model_step_diverged",
            Error::RunOverlap { .. } => "run_overlap",
            Error::TokenBudgetExhausted { .. } => "token_budget_exhausted",
            Error::ModelStepsExhausted { .. } => "model_steps_exhausted",
            Error::Config(_) => "config",
        }
    }

    /// Whether the error is about the action the model asked for, so that the model can act
    /// on it — its retries are spent ([`BudgetExhausted`](Error::BudgetExhausted)), its turn
    /// started all the actions it may ([`TurnBudgetExhausted`](Error::TurnBudgetExhausted)), or
    /// its tool did ([`ToolBudgetExhausted`](Error::ToolBudgetExhausted)),
    /// it reused a key ([`PayloadMismatch`](Error::PayloadMismatch)), the same call is still
    /// running ([`InFlight`](Error::InFlight)), an earlier one was cut off
    /// ([`Interrupted`](Error::Interrupted)) or cannot be shown again
    /// ([`NotReplayable`](Error::NotReplayable)), this one was stopped before its result was
    /// recorded ([`LeaseLost`](Error::LeaseLost)), a transactional tool's outcome is what its
    /// text says ([`TransactionEnded`](Error::TransactionEnded),
    /// [`CommitFailed`](Error::CommitFailed)), or another run of the turn acts at once
    /// ([`RunOverlap`](Error::RunOverlap)) — rather than a failure of the application
    /// (no turn, a store that is down, a bad record, a configuration mistake).
    ///
    /// Over MCP the first kind is a tool result and the second a protocol error. Every error
    /// has a [`model_text`](Error::model_text) all the same, for a client (rig's agent loop)
    /// that gives every failed call to the model.
    pub fn is_for_model(&self) -> bool {
        match self {
            Error::BudgetExhausted { .. }
            | Error::TurnBudgetExhausted { .. }
            | Error::ToolBudgetExhausted { .. }
            | Error::PayloadMismatch { .. }
            | Error::InFlight { .. }
            | Error::Interrupted { .. }
            | Error::NotReplayable { .. }
            | Error::LeaseLost { .. }
            | Error::TransactionEnded { .. }
            | Error::CommitFailed { .. }
            | Error::RunOverlap { .. } => true,
            Error::NoTurn { .. }
            | Error::Decode { .. }
            | Error::Encode { .. }
            | Error::Store { .. }
            | Error::Reentrant { .. }
            | Error::CorruptRecord { .. }
            | Error::UnreadableRecord { .. }
            | Error::DuplicateTool { .. }
            | Error::NameClash { .. }
            | Error::SharedAcrossTypes { .. }
            | Error::ModelStepDiverged { .. }
            | Error::TokenBudgetExhausted { .. }
            | Error::ModelStepsExhausted { .. }
            | Error::Config(_) => false,
        }
    }

    /// The text a model reads when this error is the result of a tool call it made: what
    /// happened to the action and what to do next. It names no Rust API, key or store; the
    /// developer's hints are in the `Display` text, which the engine logs.
    ///
    /// ```
    /// # extern crate idem_tools_runtime as idem_tools;
    /// use idem_tools::{Error, Key};
    ///
    /// let key = Key::from_bytes([7; 32]).short();
    /// let stuck = Error::BudgetExhausted { tool: "send", key, attempts: 3, limit: 3 };
    /// assert!(stuck.model_text().contains("Stop retrying"));
    /// assert!(stuck.to_string().contains("send")); // the developer's text
    /// ```
    pub fn model_text(&self) -> String {
        match self {
            Error::BudgetExhausted { attempts, .. } => format!(
                "This action was tried {} with these same arguments in this turn without a \
                 result, so it will not be tried again in this turn. Stop retrying it. An \
                 attempt that was cut off (a crash, a restart) may still have taken effect, so \
                 do not assume it failed: check whether it happened (for example with a \
                 read-only tool) before you tell the user.",
                times(*attempts)
            ),
            Error::TurnBudgetExhausted { calls, .. } => format!(
                "This turn already started {}, the most it is allowed, so this new action was \
                 not started. Repeating one of the actions already started, with the same \
                 arguments, usually still works: it returns that action's result, or tries it \
                 again if it failed. Start no new actions in this turn: tell the user what was \
                 done.",
                actions(*calls)
            ),
            Error::ToolBudgetExhausted { calls, .. } => format!(
                "This tool already started {} in this turn, the most it may, so this new action \
                 was not started. Stop calling this tool with new arguments: tell the user what \
                 was done, and that you are stuck.",
                actions(*calls)
            ),
            Error::PayloadMismatch {
                differs,
                running,
                earlier,
                refused,
                ..
            } => mismatch_message(*differs, *running, *earlier, *refused),
            Error::InFlight { free_within, .. } => format!(
                "The same action, with these same arguments, is still running from an earlier \
                 call. Wait a little (up to {}), then call it again with the same arguments to get \
                 its result; do not change the arguments.",
                seconds(*free_within)
            ),
            Error::LeaseLost { .. } => "This call of the action was stopped before its result \
                 could be recorded, so it may or may not have taken effect. Do not call it again \
                 blindly: check whether it happened (for example with a read-only tool), or tell \
                 the user."
                .to_owned(),
            Error::Interrupted { .. } => "An earlier call of this \
                 action with these same arguments was interrupted before it finished, so it may \
                 or may not have taken effect. Do not call it again blindly: check whether it \
                 happened (for example with a read-only tool), or tell the user."
                .to_owned(),
            Error::NotReplayable { .. } => "This action already ran with these arguments, but \
                 its result cannot be shown again. Do not call it again: the action is done."
                .to_owned(),
            // The record may hold a result, a failure (of a build that recorded failures), or
            // be a newer build's: it says nothing the model may pass on as done.
            Error::Decode { .. } => "An earlier call of this action with these same arguments \
                 left a record that cannot be read back, so it is not known whether the action \
                 succeeded or failed; it was not run now. Do not call it again: tell the user \
                 that this action needs checking by a person."
                .to_owned(),
            Error::CorruptRecord { .. } | Error::UnreadableRecord { .. } => "The record of this \
                 action is damaged, so it is not known whether the action already ran; it was \
                 not run now. Do not call it again: tell the user that this action needs \
                 checking by a person."
                .to_owned(),
            Error::Store { .. } => "This action was not run, and nothing was done: the \
                 application could not reach the place where it keeps track of its actions. \
                 You may call it again in a moment with the same arguments; if it fails again, \
                 tell the user that this action is unavailable right now."
                .to_owned(),
            Error::NoTurn { .. } => format!(
                "This action was not run, and nothing was done: the application made this call \
                 outside of a turn, so it could not make the action safe to repeat. {UNAVAILABLE}"
            ),
            Error::Encode { .. } => format!(
                "This action was not run, and nothing was done: the application could not \
                 record its arguments. {UNAVAILABLE}"
            ),
            Error::Reentrant { .. } => format!(
                "This action was not run, and nothing was done: it was asked for again from \
                 inside its own run, with the same arguments, and would have waited for itself \
                 forever. {UNAVAILABLE}"
            ),
            Error::NameClash { .. } => "This action was not run now, but an earlier call with \
                 the same arguments was made by an older build or another part of the \
                 application, so it may already have been done. Do not call it again: tell the user that this \
                 action may or may not have been done and needs checking by a person."
                .to_owned(),
            Error::DuplicateTool { .. }
            | Error::SharedAcrossTypes { .. }
            | Error::Config(_) => {
                format!(
                    "This action was not run, and nothing was done: the application is \
                     misconfigured. {UNAVAILABLE}"
                )
            }
            Error::TransactionEnded { .. } => "This action was not finished properly, so it may \
                 or may not have taken effect. Do not call it again blindly: check whether it \
                 happened (for example with a read-only tool), or tell the user."
                .to_owned(),
            Error::CommitFailed { .. } => "This action may or may not have been done: saving it \
                 failed at the last moment. To find out, call it again with the same arguments: \
                 if it was done you get its result, and if it was not it is done now, once."
                .to_owned(),
            Error::ModelStepDiverged { .. } => "This conversation cannot go on: it was \
                 restarted, and the request now differs from the one the earlier run recorded. \
                 Nothing more was done. The actions it already took stand and must not be done \
                 again: tell the user that this request stopped part way, what is known to be \
                 done, and that starting it over would repeat those actions."
                .to_owned(),
            Error::RunOverlap { .. } => "This action was not started here: the same request \
                 is being handled a second time, elsewhere, and that one decides this action. \
                 Do not call it again, with these or other arguments: tell the user that this \
                 request is already being handled and stop."
                .to_owned(),
            Error::TokenBudgetExhausted { .. } => "This turn used all the tokens it may, so \
                 the model was not asked again and nothing more was done. Stop: tell the user \
                 what was done so far and that the request is too large for one turn."
                .to_owned(),
            Error::ModelStepsExhausted { .. } => "This turn asked the model as many times as it \
                 may, so the model was not asked again and nothing more was done. Stop: tell \
                 the user what was done so far and that the request needs more steps than one \
                 turn allows."
                .to_owned(),
        }
    }
}

/// `30 seconds`, `1 second`, `2 minutes`: a wait, rounded up, in words.
fn seconds(wait: std::time::Duration) -> String {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    match secs {
        0 | 1 => "1 second".to_owned(),
        s if s < 120 => format!("{s} seconds"),
        s => format!("{} minutes", s.div_ceil(60)),
    }
}

/// What a model reads when a key is reused with other arguments, by a call still `running` or
/// recorded (its action then `earlier`: done, failed, cut off or unknown), refused `refused` times in
/// this process: which arguments differ, and what it can do (in the words of a tool call: no
/// Rust API); from the second refusal of a recorded action on, to stop (a model that lost the
/// earlier arguments, restarted from the top, rewords again and again). A running call may
/// still fail and give the key back: it is waited for. An action is said to be done only if
/// its record says so.
fn mismatch_message(differs: Mismatch, running: bool, earlier: Earlier, refused: u32) -> String {
    let names: Vec<String> = match differs {
        Mismatch::Unkeyed(unkeyed) => unkeyed.names().map(|n| format!("\"{n}\"")).collect(),
        Mismatch::KeyArgument(name) => {
            return caller_key_message(Some(name), running, earlier, refused);
        }
        Mismatch::ClientKey => Vec::new(),
    };
    if names.is_empty() {
        // A key the application made: from the arguments, no argument of the call can differ.
        return caller_key_message(None, running, earlier, refused);
    }
    if !running && earlier != Earlier::Done {
        return undone_mismatch_message(&names, earlier, refused);
    }
    let (count, names) = (names.len(), names.join(", "));
    let again = refused > 1;
    let (differ, them) = match count {
        1 => (format!("{names} differs"), format!("the earlier {names}")),
        _ => (
            format!("one of {names} differs"),
            "the earlier values of those".to_owned(),
        ),
    };
    if running {
        return format!(
            "This action is still running in this turn, from an earlier call of this tool \
             that had the same arguments except that {differ}, which does not make it another \
             action. So this call was refused and nothing was done. Wait a little, then call \
             it again with {them} to get its result; if you do not know them, wait, then check \
             whether it happened (for example with a read-only tool) before you do it again."
        );
    }
    if again {
        return format!(
            "This call was refused {} and nothing was done: this tool already did this action \
             in this turn, and {differ}, which does not make it another action. Stop calling \
             this tool for this action: it was done with {them}; tell the user what was done. \
             For another action, change the arguments that say what the action is.",
            times(refused)
        );
    }
    format!(
        "This tool already did this action in this turn: that call had the same arguments \
         except that {differ}, which does not make it another action. So this call was refused \
         and nothing was done; the earlier call stands. To get its result, call it again with \
         {them}; if you do not know them, do not call it again for this action: it was done. \
         For another action, change the arguments that say what the action is, or wait for \
         the next turn."
    )
}

/// [`mismatch_message`] for a recorded action that failed, was cut off, or whose record cannot be
/// read: never "done".
fn undone_mismatch_message(names: &[String], earlier: Earlier, refused: u32) -> String {
    let (became, next) = match earlier {
        Earlier::Failed => (
            "failed, and its failure is recorded: it will not be tried again in this turn",
            "tell the user that it failed",
        ),
        Earlier::Unknown => (
            "left a record that is damaged, so whether it took effect is not known",
            "tell the user that this action needs checking by a person",
        ),
        _ => (
            "was interrupted before it finished, so it may or may not have taken effect",
            "check whether it happened (for example with a read-only tool), or tell the user \
             that it may or may not have been done",
        ),
    };
    let stop = if refused > 1 {
        format!(
            " This call was refused {} for it: stop calling this tool for this action.",
            times(refused)
        )
    } else {
        String::new()
    };
    let earlier_call = match names.len() {
        1 => format!(
            "An earlier call of this tool in this turn, with the same arguments except that {} \
             differs (which does not make it another action),",
            names[0]
        ),
        _ => format!(
            "An earlier call of this tool in this turn, with the same arguments except that one \
             of {} differs (which does not make it another action),",
            names.join(", ")
        ),
    };
    format!(
        "{earlier_call} {became}. So this call was refused and nothing was done now.{stop} Do \
         not say that the action was done: {next}."
    )
}

/// [`mismatch_message`] for a key the caller supplied: the model's argument `param` (`#[key]`),
/// or, with `None`, a key the application sent that the model cannot change (MCP's
/// `idempotencyKey`). Such a key outlives the turn and may name another action than this
/// call's, so the model is told of that earlier action (done only if its record says so),
/// never that this one failed, and how a new action gets made: a new value of its argument, or,
/// for the application's key, by the application (the model tells the user).
fn caller_key_message(
    param: Option<&str>,
    running: bool,
    earlier: Earlier,
    refused: u32,
) -> String {
    // A `#[key]` pattern, whose name the model does not know.
    let unnamed = param == Some("");
    let (this_key, that_key) = match param {
        Some("") => (
            "The idempotency key among the arguments of this call".to_owned(),
            "that idempotency key".to_owned(),
        ),
        Some(name) => (
            format!("The \"{name}\" of this call"),
            format!("that \"{name}\""),
        ),
        None => (
            "The idempotency key the application sent with this call (it is not one of your \
             arguments)"
                .to_owned(),
            "that idempotency key".to_owned(),
        ),
    };
    // What makes this call's action, if it is another one.
    let new_action = match param {
        Some(_) if unnamed => {
            "for another action, call again with a new idempotency key".to_owned()
        }
        Some(name) => format!("for another action, call again with a new \"{name}\""),
        None => "if this is another action, tell the user that it was not done because the \
                 application reused an idempotency key"
            .to_owned(),
    };
    let other = "an action with different arguments, or for another account or object this \
                 tool acts for,";
    if running {
        // That action may still fail and give the key back: nothing final is said.
        let another = match param {
            Some(_) => &new_action,
            None => "if it is another action, wait a little, then call again",
        };
        return format!(
            "{this_key} belongs to {other} that is still running, so this call was refused and \
             nothing was done. If this call repeats that action, wait, then check whether it \
             happened (for example with a read-only tool) before you do it again; {another}."
        );
    }
    let stop = if refused > 1 {
        format!(
            " This call was refused {} for {that_key} already: stop repeating it.",
            times(refused)
        )
    } else {
        String::new()
    };
    if earlier == Earlier::Done {
        return format!(
            "{this_key} already belongs to {other} that was done, so this call was refused and \
             nothing was done now.{stop} If this call repeats that action, it was done: do not \
             do it again, tell the user what was done; {new_action}."
        );
    }
    let (became, same) = match earlier {
        Earlier::Failed => ("failed, and its failure is kept", ""),
        Earlier::Unknown => (
            "left a record that is damaged, so whether it took effect is not known",
            " If this call is for that same action, tell the user that it needs checking by a \
             person.",
        ),
        _ => (
            "was interrupted before it finished, so it may or may not have taken effect",
            " If this call is for that same action, first check whether it happened (for \
             example with a read-only tool).",
        ),
    };
    let with_it = match param {
        Some(_) => format!(" with {that_key}"),
        None => String::new(),
    };
    format!(
        "{this_key} was used before by {other} which {became}. So this call was refused and \
         nothing was done now.{stop} Do not say that any action was done. Do not repeat this \
         call{with_it}: {new_action}.{same}"
    )
}

/// One error of every kind, for the tests of the texts a model reads.
#[cfg(test)]
pub(crate) fn every_error() -> Vec<Error> {
    let key = || crate::Key::from_bytes([1; 32]).short();
    vec![
        Error::NoTurn { tool: "t" },
        Error::BudgetExhausted {
            tool: "t",
            key: key(),
            attempts: 3,
            limit: 3,
        },
        Error::TurnBudgetExhausted {
            tool: "t",
            turn: "x".into(),
            calls: 9,
            limit: 9,
        },
        Error::ToolBudgetExhausted {
            tool: "t",
            turn: "x".into(),
            calls: 5,
            limit: 5,
        },
        Error::PayloadMismatch {
            tool: "t",
            key: key(),
            differs: crate::error::Mismatch::ClientKey,
            running: false,
            earlier: Earlier::Done,
            refused: 1,
        },
        Error::InFlight {
            tool: "t",
            key: key(),
            waited: std::time::Duration::from_secs(1),
            free_within: std::time::Duration::from_secs(30),
        },
        Error::Decode {
            tool: "t",
            key: key(),
            message: "m".into(),
        },
        Error::Encode {
            tool: "t",
            what: "its argument `a`".into(),
            message: "m".into(),
        },
        Error::store("begin", "connection refused"),
        Error::Reentrant {
            tool: "t",
            key: key(),
        },
        Error::Interrupted {
            tool: "t",
            key: key(),
        },
        Error::NotReplayable {
            tool: "t",
            key: key(),
            message: "m".into(),
        },
        Error::LeaseLost { key: key() },
        Error::CorruptRecord {
            key: key(),
            message: "m".into(),
        },
        Error::UnreadableRecord {
            message: "m".into(),
        },
        Error::DuplicateTool { name: "t" },
        Error::NameClash {
            tool: "t",
            key: key(),
        },
        Error::TransactionEnded {
            tool: "t",
            key: key(),
            kept: crate::KeyKept::Committed,
        },
        Error::CommitFailed {
            tool: "t",
            key: key(),
            message: "the connection closed".into(),
        },
        Error::ModelStepDiverged {
            conversation: "planner".into(),
            step: 2,
            turn: "x".into(),
        },
        Error::RunOverlap {
            turn: "x".into(),
            conversation: "c".into(),
            step: 1,
            tool: "t".into(),
        },
        Error::TokenBudgetExhausted {
            turn: "x".into(),
            spent: 10,
            limit: 10,
        },
        Error::ModelStepsExhausted {
            turn: "x".into(),
            steps: 50,
            limit: 50,
        },
        Error::Config("bad".into()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What marks a Rust API (or a developer's detail) in a text.
    const RUST_API_MARKERS: &[&str] = &[
        "`",
        "::",
        "#[",
        "()",
        "fn ",
        "impl",
        "Turn",
        "Error",
        "lease",
        "version",
        "Serialize",
        "admin",
        "key ",
    ];

    /// What a model reads for a key of `charge` reused with other arguments.
    fn mismatch_text(differs: Mismatch, running: bool, earlier: Earlier, refused: u32) -> String {
        let key = crate::Key::from_bytes([7; 32]).short();
        let tool = "charge";
        let error = Error::PayloadMismatch {
            tool,
            key,
            differs,
            running,
            earlier,
            refused,
        };
        error.model_text()
    }

    /// One line with single spaces, and no Rust API ("idempotency key" is the model's own word
    /// for a key it passes).
    fn assert_worded_for_a_model(text: &str) {
        assert!(!text.contains("  ") && !text.contains('\n'), "{text:?}");
        let text = text.replace("idempotency key", "");
        for marker in RUST_API_MARKERS {
            assert!(!text.contains(marker), "{marker:?} in {text}");
        }
    }

    #[test]
    fn every_text_is_one_line_with_single_spaces() {
        for error in every_error() {
            for text in [error.to_string(), error.model_text()] {
                assert!(!text.contains("  ") && !text.contains('\n'), "{text:?}");
            }
        }
    }

    #[test]
    fn no_model_text_names_a_rust_api_and_each_says_what_to_do() {
        let errors = every_error();
        let codes: std::collections::BTreeSet<_> = errors.iter().map(Error::code).collect();
        assert_eq!(codes.len(), errors.len(), "one error of every kind");
        for error in errors {
            let text = error.model_text();
            for marker in RUST_API_MARKERS {
                // "idempotency key" is the model's own word for a key argument it passes.
                let text = text.replace("idempotency key", "");
                assert!(
                    !text.contains(marker),
                    "{}: {marker:?} in {text}",
                    error.code()
                );
            }
            let told = [
                "tell the user",
                "call it again",
                "repeat",
                "Do not",
                "do not",
            ];
            assert!(
                told.iter().any(|next| text.contains(next)),
                "{}: says what to do next: {text}",
                error.code()
            );
        }
    }

    /// A model that rewords an argument the key leaves out, and lost the earlier value (a run
    /// restarted from the top), is told how to leave the loop at once, and to stop from the
    /// second refusal of the key in its run on.
    #[test]
    fn a_key_refused_again_in_a_run_tells_the_model_to_stop() {
        let memo = Mismatch::Unkeyed(crate::Unkeyed::new(&["memo"], 0b1));
        let text =
            |differs, running, refused| mismatch_text(differs, running, Earlier::Done, refused);
        // A call still running may fail and give the key back: never "stop", never "done".
        let argument = Mismatch::KeyArgument("request_id");
        for differs in [memo, argument, Mismatch::ClientKey] {
            for refused in [1, 2, 9] {
                let running = text(differs, true, refused);
                assert!(
                    running.contains("running") && !running.contains("Stop"),
                    "{running}"
                );
                assert!(!running.contains("it was done") && !running.contains("tell the user"));
            }
        }
        let first = text(memo, false, 1);
        assert!(
            first.contains("call it again with the earlier \"memo\"")
                && first.contains("if you do not know them, do not call it again"),
            "{first}"
        );
        for (differs, stop) in [
            (memo, "Stop calling this tool for this action"),
            (argument, "stop repeating it"),
            (Mismatch::ClientKey, "stop repeating it"),
        ] {
            for (refused, count) in [(2, "twice"), (7, "7 times")] {
                let again = text(differs, false, refused);
                assert!(
                    again.contains(stop)
                        && again.contains(count)
                        && again.contains("tell the user"),
                    "{again}"
                );
                assert!(!again.contains("call it again"), "{again}");
                assert_worded_for_a_model(&again);
            }
        }
    }

    /// A key reused with other arguments whose record holds a failure (`cache_errors`), the
    /// marker of a call cut off, or nothing readable is never said to be done (before: "This
    /// tool already did this action … it was done", and from the second refusal "tell the user
    /// what was done": a declined charge reported as made; found by a review of reworded
    /// retries). A caller's key: the test below.
    #[test]
    fn a_reused_key_whose_action_failed_or_was_cut_off_is_not_called_done() {
        let memo = Mismatch::Unkeyed(crate::Unkeyed::new(&["memo"], 0b1));
        for differs in [memo] {
            for (earlier, says) in [
                (Earlier::Failed, "tell the user that it failed"),
                (Earlier::Interrupted, "may or may not have taken effect"),
                (Earlier::Unknown, "whether it took effect is not known"),
            ] {
                for refused in [1, 2, 5] {
                    let text = mismatch_text(differs, false, earlier, refused);
                    assert!(text.contains(says), "{text}");
                    assert!(text.contains("nothing was done now"), "{text}");
                    for claim in ["already did", "it was done", "stands", "what was done"] {
                        assert!(!text.contains(claim), "{claim:?} in {text}");
                    }
                    assert_eq!(
                        text.contains("stop calling this tool"),
                        refused > 1,
                        "{text}"
                    );
                    assert_worded_for_a_model(&text);
                }
            }
        }
    }

    /// A key the caller supplied (MCP's `idempotencyKey`, a `#[key]` argument) outlives the turn
    /// and may name another action than the reworded call's: when its earlier action failed,
    /// was cut off or left a damaged record, the model was told "it will not be tried again in
    /// this turn" and to "tell the user that it failed" (this call's action, never tried), and
    /// not how this action gets made (found by a review of the reworded-retry fixes).
    #[test]
    fn a_caller_key_whose_earlier_action_did_not_finish_is_not_called_failed() {
        for (differs, next) in [
            (
                Mismatch::KeyArgument("request_id"),
                "call again with a new \"request_id\"",
            ),
            (Mismatch::ClientKey, "application reused an idempotency key"),
        ] {
            for earlier in [Earlier::Failed, Earlier::Interrupted, Earlier::Unknown] {
                for refused in [1, 2, 5] {
                    let text = mismatch_text(differs, false, earlier, refused);
                    assert!(text.contains(next), "{text}");
                    assert!(text.contains("nothing was done now"), "{text}");
                    for claim in [
                        "in this turn",
                        "tell the user that it failed",
                        "stop calling this tool",
                        "already did",
                        "it was done",
                    ] {
                        assert!(!text.contains(claim), "{claim:?} in {text}");
                    }
                    assert_eq!(text.contains("stop repeating it"), refused > 1, "{text}");
                    assert_worded_for_a_model(&text);
                }
            }
        }
    }

    /// A key the application sent (MCP's `_meta["idempotencyKey"]`) is not among the model's
    /// arguments: the model was told "use a new idempotency key", which it cannot do (it might
    /// invent an argument for it). It is told whose key it is, and to tell the user; a
    /// `#[key]` argument is named, so the model knows which argument makes a new action.
    #[test]
    fn only_a_key_the_model_passes_is_one_it_is_told_to_change() {
        let every = |differs| {
            let mut texts = Vec::new();
            for running in [true, false] {
                for earlier in [
                    Earlier::Done,
                    Earlier::Failed,
                    Earlier::Interrupted,
                    Earlier::Unknown,
                ] {
                    for refused in [1, 2, 5] {
                        texts.push(mismatch_text(differs, running, earlier, refused));
                    }
                }
            }
            texts
        };
        for text in every(Mismatch::ClientKey) {
            assert!(text.contains("not one of your arguments"), "{text}");
            for told in ["new idempotency key", "with a new", "new key"] {
                assert!(!text.contains(told), "{told:?} in {text}");
            }
        }
        for text in every(Mismatch::KeyArgument("request_id")) {
            assert!(text.contains("new \"request_id\""), "{text}");
            assert!(!text.contains("idempotency key"), "{text}");
        }
        // A `#[key]` pattern has no name the model knows (its `argN` is the key's).
        for text in every(Mismatch::KeyArgument("")) {
            assert!(text.contains("new idempotency key"), "{text}");
            assert!(!text.contains("\"\""), "{text}");
        }
    }

    /// Texts that tell the model what happened to an action that may have run claim no more
    /// than is known: a spent per-key budget may hide an attempt cut off after it took effect
    /// (a killed process), and a diverged restart must not send the user back to the start.
    #[test]
    fn texts_after_uncertain_attempts_do_not_claim_a_failure() {
        let key = crate::Key::from_bytes([7; 32]).short();
        let spent = Error::BudgetExhausted {
            tool: "charge",
            key,
            attempts: 3,
            limit: 3,
        }
        .model_text();
        assert!(!spent.contains("tell the user that it failed"), "{spent}");
        assert!(spent.contains("may still have taken effect"), "{spent}");
        assert!(spent.contains("Stop retrying"), "{spent}");
        let diverged = Error::ModelStepDiverged {
            conversation: "planner".into(),
            step: 1,
            turn: "t".into(),
        }
        .model_text();
        assert!(!diverged.contains("has to start again"), "{diverged}");
        assert!(diverged.contains("must not be done again"), "{diverged}");
        // Another tool's record under this key (a tool that moved, another service): an
        // earlier call may have done the action.
        let clash = Error::NameClash {
            tool: "charge",
            key,
        }
        .model_text();
        assert!(!clash.contains("nothing was done"), "{clash}");
        assert!(clash.contains("may already have been done"), "{clash}");
    }

    #[test]
    fn the_developer_hint_stays_in_the_display_text() {
        let capped = Error::TurnBudgetExhausted {
            tool: "t",
            turn: "x".into(),
            calls: 2,
            limit: 2,
        };
        assert!(capped.to_string().contains("Turn::with_max_calls"));
        assert!(!capped.model_text().contains("with_max_calls"));
        let looping = Error::ToolBudgetExhausted {
            tool: "charge",
            turn: "x".into(),
            calls: 5,
            limit: 5,
        };
        assert!(looping.to_string().contains("actions_per_turn"));
        assert!(looping.to_string().contains("Turn::with_actions_per_tool"));
        let text = looping.model_text();
        assert!(text.contains("already started 5 actions in this turn, the most it may"));
        assert!(text.contains("this new action was not started"));
        assert!(text.contains("tell the user what was done") && text.contains("stuck"));
        let outside = Error::NoTurn { tool: "t" };
        assert!(outside.to_string().contains("Turn::new"));
        assert!(outside.model_text().contains("outside of a turn"));
    }
}
