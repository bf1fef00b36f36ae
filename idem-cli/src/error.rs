//! The CLI's errors: a message saying what to do, and the exit code it maps to.

use std::fmt;
use std::process::ExitCode;

/// Why a command failed, which decides the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No such record, an ambiguous key, a declined confirmation: exit code 1.
    NotFoundOrRefused,
    /// Bad arguments, a store that cannot be opened or reached, a failing store: exit code 2.
    UsageOrConnection,
}

/// A failed command: printed as `idem: <message>` on stderr.
#[derive(Debug)]
pub struct CliError {
    kind: Kind,
    message: String,
}

impl CliError {
    /// A record that is not there, or an ambiguous key (exit code 1).
    pub fn not_found(message: impl Into<String>) -> Self {
        CliError {
            kind: Kind::NotFoundOrRefused,
            message: message.into(),
        }
    }

    /// An action the CLI refused to take, or the operator declined (exit code 1).
    pub fn refused(message: impl Into<String>) -> Self {
        Self::not_found(message)
    }

    /// Bad arguments (exit code 2).
    pub fn usage(message: impl Into<String>) -> Self {
        CliError {
            kind: Kind::UsageOrConnection,
            message: message.into(),
        }
    }

    /// A store that cannot be opened or reached, or that failed (exit code 2).
    pub fn connection(message: impl Into<String>) -> Self {
        Self::usage(message)
    }

    /// What went wrong.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The process exit code for this error.
    pub fn exit_code(&self) -> ExitCode {
        match self.kind() {
            Kind::NotFoundOrRefused => ExitCode::from(1),
            Kind::UsageOrConnection => ExitCode::from(2),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

impl From<idem_tools_runtime::Error> for CliError {
    /// A store error in the middle of a command: the store failed or became unreachable.
    fn from(error: idem_tools_runtime::Error) -> Self {
        match error {
            // The engine's wording ("the tool was not run") is about tool calls, not this CLI.
            idem_tools_runtime::Error::Store { operation, source } => {
                CliError::connection(format!(
                    "the store failed during {operation} ({source}): check that it is reachable, \
                 then retry"
                ))
            }
            other => CliError::connection(other.to_string()),
        }
    }
}

impl From<std::io::Error> for CliError {
    /// Writing the output failed (a closed pipe, a full disk).
    fn from(error: std::io::Error) -> Self {
        CliError::connection(format!("could not write the output: {error}"))
    }
}
