//! `peergate keys …`: the keys that sign the Agent Card, and the key that encrypts push
//! notification secrets.

use super::CliError;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(super) enum KeysCommand {
    /// Write a new private key (PKCS#8 PEM, mode 0600) and print its path on stdout.
    Generate {
        /// EdDSA (Ed25519) or ES256 (P-256).
        #[arg(long)]
        alg: String,
        /// The key id to use in the policy: 1 to 64 of letters, digits and ._-
        #[arg(long)]
        kid: String,
        /// Where to write it [default: keys/<kid>.pem].
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Write a new key for push.key_file (32 random bytes, base64url, mode 0600) and print its
    /// path on stdout.
    Push {
        /// Where to write it.
        #[arg(
            long,
            value_name = "FILE",
            default_value = "keys/push-notification.key"
        )]
        out: PathBuf,
    },
}

pub(super) async fn run(command: KeysCommand) -> Result<(), CliError> {
    match command {
        KeysCommand::Generate { alg, kid, out } => {
            if !crate::jose::keys::is_valid_kid(&kid) {
                return Err(CliError::new(format!(
                    "invalid --kid {kid:?}: use 1 to 64 of letters, digits and ._-"
                )));
            }
            let path = out.unwrap_or_else(|| PathBuf::from("keys").join(format!("{kid}.pem")));
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    CliError::new(format!("cannot create {}: {}", parent.display(), e.kind()))
                })?;
            }
            crate::jose::keys::generate(&alg, &path).map_err(CliError::new)?;
            eprintln!(
                "wrote a {alg} key. Add to the policy:\n[[signing.keys]]\nkid = \"{kid}\"\nalg = \"{alg}\"\nprivate_key_file = \"{}\"",
                path.display()
            );
            println!("{}", path.display());
            Ok(())
        }
        KeysCommand::Push { out } => {
            if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    CliError::new(format!("cannot create {}: {}", parent.display(), e.kind()))
                })?;
            }
            crate::jose::keys::write_new_key(&out, crate::push::seal::generate().as_bytes())
                .map_err(CliError::new)?;
            eprintln!(
                "wrote a push notification key. Give every instance the same file:\n[push]\nkey_file = \"{}\"",
                out.display()
            );
            println!("{}", out.display());
            Ok(())
        }
    }
}
