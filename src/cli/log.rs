//! `peergate log …`: the operator's view of the answer log.

use super::{CliError, DataDir};
use crate::a2a::log_audit::{AuditOutcome, audit};
use crate::store::Store;
use crate::tlog::note::{Checkpoint, NoteVerifier};
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(super) enum LogCommand {
    /// Recompute the answer log from the stored receipts and compare it with every stored hash
    /// and every signed checkpoint; exits 0 when all hold, else 1 naming the first index that
    /// does not. Needs the log key (`receipts.log_key_file`, or the data directory's), and
    /// takes checkpoints signed by the keys in `receipts.retired_log_key_files` too.
    Audit {
        /// The policy naming the log key; without it, the one the gateway serving this store
        /// last started with, or the default.
        #[arg(long, value_name = "FILE")]
        policy: Option<PathBuf>,
        #[command(flatten)]
        data: DataDir,
    },
}

pub(super) async fn run(command: LogCommand) -> Result<(), CliError> {
    let LogCommand::Audit { policy, data } = command;
    let (policy, _) = super::policy_for_defaults(policy.as_deref(), &data)?;
    let key = match &policy.receipts.log_key_file {
        Some(path) => crate::jose::keys::read_ed25519(path),
        None => {
            let file = data.dir.join(crate::jose::keys::DEFAULT_LOG_KEY_FILE);
            if !file.is_file() {
                return Err(CliError::new(format!(
                    "no log key: receipts.log_key_file is not set and the data directory holds no {}",
                    crate::jose::keys::DEFAULT_LOG_KEY_FILE
                )));
            }
            crate::jose::keys::read_ed25519(&file)
        }
    }
    .map_err(|e| CliError::new(format!("receipts.log_key_file: {e}")))?;
    let retired = (policy.receipts)
        .retired_log_keys()
        .map_err(CliError::new)?;
    if data.store.is_none() {
        super::check_data_dir(&data.dir, false)?;
    }
    let store = Store::open_at(&data.location()).await?;
    eprintln!("store: {}", store.describe());
    let log = store.log();
    let outcome = match log.latest_checkpoint().await? {
        None => Ok(AuditOutcome::Consistent {
            receipts: 0,
            checkpoints: 0,
        }),
        Some((_, note)) => {
            let text = note.split("\n\n").next().unwrap_or_default();
            let origin = Checkpoint::parse(&format!("{text}\n"))
                .map_err(|e| CliError::new(format!("the latest checkpoint: {e}")))?
                .origin;
            let named = |key| {
                NoteVerifier::new(&origin, key)
                    .map_err(|e| CliError::new(format!("the log's origin: {e}")))
            };
            let mut keys = vec![named(key.verifying_key())?];
            for retired in retired {
                keys.push(named(retired)?);
            }
            audit(&*log, &keys).await
        }
    };
    store.close().await;
    match outcome? {
        AuditOutcome::Consistent {
            receipts,
            checkpoints,
        } => {
            println!(
                "answer log: consistent ({receipts} receipts, {checkpoints} signed checkpoints)"
            );
            Ok(())
        }
        AuditOutcome::Broken { index, why } => Err(CliError::new(format!(
            "answer log: does not hold from index {index}: {why}"
        ))),
    }
}
