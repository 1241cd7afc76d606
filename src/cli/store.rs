//! `peergate store …`: moving the store of record.

use super::CliError;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(super) enum StoreCommand {
    /// Copy the embedded SQLite store into a new PostgreSQL store (which must hold nothing
    /// yet), all or nothing. Stop the gateway serving the SQLite store first.
    Copy {
        /// Data directory holding the SQLite store to copy.
        #[arg(long = "data", value_name = "DIR", default_value = "data")]
        data: PathBuf,
        /// The PostgreSQL store to copy into: postgres://user:password@host:port/database.
        /// Prefer the environment variable, so the password is in no process listing.
        #[arg(
            long = "to",
            value_name = "URL",
            env = "PEERGATE_STORE_URL",
            hide_env_values = true
        )]
        to: String,
    },
}

pub(super) async fn run(command: StoreCommand) -> Result<(), CliError> {
    match command {
        StoreCommand::Copy { data, to } => {
            super::check_data_dir(&data, false)?;
            let report = crate::store::copy::sqlite_to_postgres(&data, &to).await?;
            let total: u64 = report.iter().map(|(_, rows)| rows).sum();
            let tables: Vec<String> = report
                .iter()
                .map(|(table, rows)| format!("{table} {rows}"))
                .collect();
            eprintln!(
                "copied {total} rows into the PostgreSQL store ({}); serve it with --store or PEERGATE_STORE_URL.",
                tables.join(", ")
            );
            Ok(())
        }
    }
}
