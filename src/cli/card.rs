//! `peergate card …`: checking Agent Cards.

use super::CliError;
use super::fetching::{CardKeyArgs, CardKeys, ReachArgs, document};
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub(super) enum CardCommand {
    /// Verify a card's signatures with keys you supply; exits 0 and names the kid that verified
    /// only when at least one signature verifies.
    Verify {
        /// The card: an https URL or a file.
        source: String,
        #[command(flatten)]
        keys: CardKeyArgs,
        #[command(flatten)]
        reach: ReachArgs,
    },
}

pub(super) async fn run(command: CardCommand) -> Result<(), CliError> {
    match command {
        CardCommand::Verify {
            source,
            keys,
            reach,
        } => {
            let fetcher = reach.fetcher(&crate::net::tls::default_client_config()?)?;
            let card = document(&fetcher, &source).await?;
            let keys = CardKeys::new(&keys, fetcher, &reach.trust(None));
            if keys.none_named() {
                return Err(CliError::new(
                    "no keys: give --secret KID=BASE64URL or --jwks FILE|URL".to_owned(),
                ));
            }
            let verified = keys
                .verify(&card)
                .await?
                .map_err(|e| CliError::new(format!("card not verified: {e}")))?;
            println!(
                "verified: signature by kid {} ({})",
                verified.kid, verified.alg
            );
            Ok(())
        }
    }
}
