//! The exit statuses of `peergate call`, which scripts branch on.

use super::CliError;

/// Exit status: the agent answered (a message, a completed task, or a task waiting for input).
pub const EXIT_ANSWERED: u8 = 0;
/// Exit status: anything not covered below (network, protocol, usage).
pub const EXIT_OTHER: u8 = 1;
/// Exit status: the card failed verification (or carried no signature).
pub const EXIT_CARD_NOT_VERIFIED: u8 = 3;
/// Exit status: the agent refused the credential (HTTP 401 or 403).
pub const EXIT_AUTH_REFUSED: u8 = 4;
/// Exit status: rate limited (HTTP 429); the wait is printed.
pub const EXIT_RATE_LIMITED: u8 = 5;
/// Exit status: the task failed, was rejected or was canceled.
pub const EXIT_TASK_FAILED: u8 = 6;

/// A failure with its exit status.
pub fn exit(code: u8, message: impl Into<String>) -> CliError {
    CliError {
        message: message.into(),
        exit_code: code,
    }
}
