//! `idem`: inspect and repair an idem dedup store (SQLite, Redis or PostgreSQL) from a shell.
//!
//! ```text
//! idem --sqlite agent.db list --state in-progress
//! idem --postgres postgres://app@127.0.0.1/app stats
//! idem --sqlite agent.db show 3f2a9c01b7e4
//! idem --sqlite agent.db turn conv-42/turn-7
//! idem --sqlite agent.db remove 3f2a9c01b7e4
//! ```
//!
//! Exit codes: 0 ok, 1 not found or refused, 2 usage or connection error.
#![forbid(unsafe_code)]

mod args;
mod commands;
mod confirm;
mod error;
mod keyarg;
mod open;
mod output;
mod render;
mod state;
mod when;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::commands::list::Filter;
use crate::error::CliError;

fn main() -> ExitCode {
    let cli = Cli::parse(); // exits with code 2 on a usage error
    // The stores log what they skip (a corrupt record in `list`) as warnings: show them.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .without_time()
        .with_target(false)
        .init();
    if let Command::Bench(options) = &cli.command {
        return commands::bench::main(&cli, options); // on a runtime of its own
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("idem: could not start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    let outcome = runtime
        .block_on(run(&cli))
        .and_then(|text| Ok(std::io::stdout().lock().write_all(text.as_bytes())?));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("idem: {error}");
            error.exit_code()
        }
    }
}

/// Runs the command; returns what to print on stdout.
async fn run(cli: &Cli) -> Result<String, CliError> {
    // KEY is checked before connecting, so a typo fails fast.
    let key = match &cli.command {
        Command::Show { key } | Command::Remove { key, .. } => Some(keyarg::parse(key)?),
        _ => None,
    };
    let opened = open::open(cli).await?;
    let store = &*opened.store;
    let namespace = cli.namespace.as_deref();
    let reopen = cli.reopen();
    let now = when::now_ms();
    match (&cli.command, key) {
        (
            Command::List {
                turn: Some(turn),
                limit,
                ..
            }
            | Command::Turn { id: turn, limit },
            _,
        ) => commands::turn(store, namespace.unwrap_or(""), turn, *limit, cli.json, now).await,
        (
            Command::List {
                tool, state, limit, ..
            },
            _,
        ) => {
            let filter = Filter {
                namespace,
                tool: tool.as_deref(),
                state: *state,
            };
            commands::list(store, &filter, *limit, cli.json, now).await
        }
        (Command::Show { .. }, Some(key)) => {
            commands::show(store, namespace, &key, cli.json, now, &reopen).await
        }
        (Command::Remove { yes, .. }, Some(key)) => {
            commands::remove(store, namespace, &key, *yes, cli.json, &reopen).await
        }
        (Command::Purge, _) => commands::purge(store, opened.backend, cli.json).await,
        (Command::Stats, _) => commands::stats(store, namespace, cli.json).await,
        (Command::Show { .. } | Command::Remove { .. }, None) => {
            Err(CliError::usage("KEY is required"))
        }
        (Command::Bench(_), _) => Err(CliError::usage("bench runs on a runtime of its own")),
    }
}
