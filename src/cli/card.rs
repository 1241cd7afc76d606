//! `peergate card …`: checking Agent Cards.

use super::CliError;
use super::fetching::{CardKeys, ReachArgs};
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub(super) enum CardCommand {
    /// Verify a card's signatures with keys you supply; exits 0 and names the kid that verified
    /// only when at least one signature verifies.
    Verify {
        /// The card: an https URL or a file.
        source: String,
        /// An HS256 key as KID=BASE64URL (at least 32 bytes).
        #[arg(long = "secret", value_name = "KID=BASE64URL")]
        secrets: Vec<String>,
        /// A JWKS: an https URL or a file (a URL's set is kept for the next run; see
        /// `peergate call --help`).
        #[arg(long = "jwks", value_name = "FILE|URL")]
        jwks: Vec<String>,
        #[command(flatten)]
        reach: ReachArgs,
    },
}

pub(super) async fn run(command: CardCommand) -> Result<(), CliError> {
    match command {
        CardCommand::Verify {
            source,
            secrets,
            jwks,
            reach,
        } => {
            let fetcher = reach.fetcher(&crate::net::tls::default_client_config()?)?;
            let card = if source.starts_with("https://") || source.starts_with("http://") {
                fetcher.text(&source).await?
            } else {
                std::fs::read_to_string(&source)
                    .map_err(|e| CliError::new(format!("cannot read {source}: {}", e.kind())))?
            };
            let keys = CardKeys::new(&secrets, &jwks, fetcher);
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
