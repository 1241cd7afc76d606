//! `peergate card …`: checking Agent Cards.

use super::{CliError, read_source};
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
        /// A JWKS: an https URL or a file.
        #[arg(long = "jwks", value_name = "FILE|URL")]
        jwks: Vec<String>,
        /// DANGEROUS, for tests and local development only: fetch http:// URLs on loopback.
        #[arg(long)]
        dangerous_allow_http_loopback: bool,
    },
}

pub(super) async fn run(command: CardCommand) -> Result<(), CliError> {
    match command {
        CardCommand::Verify {
            source,
            secrets,
            jwks,
            dangerous_allow_http_loopback,
        } => {
            let policy = crate::jose::fetch::FetchPolicy {
                dangerous_allow_http_loopback,
                ..Default::default()
            };
            let mut keys = crate::jose::verify::TrustedKeys::new();
            for secret in &secrets {
                keys.add_secret_arg(secret)?;
            }
            for source in &jwks {
                keys.add_jwks(&read_source(source, &policy).await?)?;
            }
            if keys.is_empty() {
                return Err(CliError::new(if jwks.is_empty() {
                    "no keys: give --secret KID=BASE64URL or --jwks FILE|URL".to_owned()
                } else {
                    "no keys: the key sets given with --jwks hold no key (an empty \"keys\" array)"
                        .to_owned()
                }));
            }
            let card = read_source(&source, &policy).await?;
            let verified = crate::jose::verify::verify_card(&card, &keys)
                .map_err(|e| CliError::new(format!("card not verified: {e}")))?;
            println!(
                "verified: signature by kid {} ({})",
                verified.kid, verified.alg
            );
            Ok(())
        }
    }
}
