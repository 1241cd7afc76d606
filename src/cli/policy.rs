//! `peergate policy …`: checking a policy without serving, and writing a starting one.

use super::CliError;
use crate::config::Policy;
use clap::{Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(super) enum PolicyCommand {
    /// Check a policy without serving, opening the store or dialling anything: exits 0 and
    /// prints the policy in effect (the file over the built-in defaults; secrets appear only as
    /// the names of the variables that hold them), else 1 naming the key and why.
    Check {
        /// Policy file [default: policies/default.toml, else the built-in defaults].
        #[arg(long = "policy", value_name = "FILE")]
        policy: Option<PathBuf>,
        /// Also check what several instances serving one store must share (exits 1 when a
        /// setting is missing).
        #[arg(long)]
        cluster: bool,
        /// The URL partners reach the door at, as `serve` takes it [default:
        /// server.public_base_url from the policy].
        #[arg(long, value_name = "URL", env = "PEERGATE_PUBLIC_BASE_URL")]
        public_base_url: Option<String>,
        /// Also fetch the metadata of each identity provider whose keys come by discovery, as
        /// `serve` would, and check it names the configured issuer (exits 1 when one cannot be
        /// read or names another issuer). The only check that dials out.
        #[arg(long)]
        discover: bool,
    },
    /// Print the built-in defaults: every key, commented, as the binary holds them (what a
    /// policy file changes).
    Defaults,
    /// Print the Cedar schema the authorization policies are validated against
    /// (`[authorization]`, docs/authorization.md): peergate's entities, actions and context.
    Schema,
    /// Write a commented starting policy: only what differs from the built-in defaults.
    Init {
        /// narrow: the narrow door to a model; full: the rest of A2A 1.0 switched on; agent:
        /// in front of an A2A agent you run.
        #[arg(long, value_enum, default_value_t = Profile::Narrow)]
        profile: Profile,
        /// Add the rest of A2A 1.0 (streaming, subscriptions, non-blocking sends,
        /// cancellation, push notifications, HTTP+JSON) to the profile, e.g. in front of an
        /// agent: `--profile agent --full`.
        #[arg(long)]
        full: bool,
        /// Write it to FILE (which must not exist yet) instead of standard output.
        #[arg(long = "out", value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

/// The Cedar policies `[authorization]` names, read and validated as `serve` would.
fn check_authorization(policy: &Policy) -> Result<(), CliError> {
    let Some(section) = &policy.authorization else {
        return Ok(());
    };
    let loaded = crate::authz::Loaded::read(&crate::app::policy_files(section))
        .map_err(|e| CliError::new(e.to_string()))?;
    eprintln!(
        "authorization: {} Cedar policies valid against the schema",
        loaded.policy_count()
    );
    Ok(())
}

/// A starting policy's shape.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum Profile {
    Narrow,
    Full,
    Agent,
}

impl Profile {
    /// The profile's starting policy, with the full surface when `full` (the `full` profile
    /// always has it).
    fn text(self, full: bool) -> String {
        let base = match self {
            Self::Narrow => include_str!("../../policies/starting/narrow.toml"),
            Self::Full => include_str!("../../policies/starting/full.toml"),
            Self::Agent => include_str!("../../policies/starting/agent.toml"),
        };
        let surface = include_str!("../../policies/starting/full_surface.toml");
        match full || matches!(self, Self::Full) {
            true => format!("{base}{surface}"),
            false => base.to_owned(),
        }
    }
}

pub(super) async fn run(command: PolicyCommand) -> Result<(), CliError> {
    match command {
        PolicyCommand::Check {
            policy,
            cluster,
            public_base_url,
            discover,
        } => {
            let (mut policy, source) = Policy::load(policy.as_deref())?;
            // What `serve` would run with: the command line's (or the environment's) URL.
            policy.override_public_base_url(public_base_url, &source)?;
            print!("{}", policy.effective_text());
            check_authorization(&policy)?;
            eprintln!("policy {source}: valid");
            if discover {
                discover_issuers(&policy, &source).await?;
            }
            if cluster {
                check_cluster(&policy, &source)?;
            }
            Ok(())
        }
        PolicyCommand::Defaults => {
            print!("{}", crate::config::EMBEDDED_DEFAULT);
            Ok(())
        }
        PolicyCommand::Schema => {
            print!("{}", crate::authz::schema::BUILT_IN);
            Ok(())
        }
        PolicyCommand::Init { profile, full, out } => {
            let text = profile.text(full);
            match out {
                None => print!("{text}"),
                Some(path) => {
                    use std::io::Write;
                    let mut file = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map_err(|e| {
                            CliError::new(format!("cannot create {}: {}", path.display(), e.kind()))
                        })?;
                    file.write_all(text.as_bytes())?;
                    eprintln!(
                        "wrote a starting policy to {}; check it with `peergate policy check --policy {}`",
                        path.display(),
                        path.display()
                    );
                }
            }
            Ok(())
        }
    }
}

/// `policy check --cluster`: what several instances serving one store must share.
fn check_cluster(policy: &Policy, source: &impl std::fmt::Display) -> Result<(), CliError> {
    let missing = policy.missing_for_several_instances();
    for (setting, why) in &missing {
        eprintln!("missing for several instances: {setting}: {why}");
    }
    if policy.server.trusted_proxies.is_empty() {
        eprintln!(
            "note: server.trusted_proxies is empty; name the load balancer there, or every client counts as its address"
        );
    }
    if policy.server.metrics_token_env.is_none() {
        eprintln!(
            "note: server.metrics_token_env is unset; a scraper of every instance needs the same scrape token (and server.metrics_listen to reach it from elsewhere)"
        );
    }
    eprintln!(
        "every instance also needs the same PEERGATE_STORE_URL (PostgreSQL) and PEERGATE_REDIS_URL, and the files and variables this policy names"
    );
    if missing.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "policy {source}: {} setting(s) several instances must share are missing",
            missing.len()
        )))
    }
}

/// `policy check --discover`: each issuer whose keys come by discovery, its metadata fetched
/// as `serve` fetches it.
async fn discover_issuers(
    policy: &Policy,
    source: &impl std::fmt::Display,
) -> Result<(), CliError> {
    let mut failed = 0;
    let discovering = policy
        .auth
        .issuers
        .iter()
        .filter(|issuer| issuer.jwks_uri.is_none() && issuer.jwks_file.is_none());
    for issuer in discovering {
        let fetch = crate::jose::fetch::FetchPolicy {
            dangerous_allow_http_loopback: issuer.dangerous_allow_http_loopback,
            ..crate::jose::fetch::FetchPolicy::default()
        };
        match crate::layers::auth::jwt::discover(&issuer.issuer, &fetch).await {
            Ok(found) => eprintln!(
                "issuer {}: metadata at {}, keys at {}",
                issuer.name, found.metadata_url, found.jwks_uri
            ),
            Err(reason) => {
                failed += 1;
                eprintln!("issuer {}: {reason}", issuer.name);
            }
        }
    }
    if failed == 0 {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "policy {source}: the metadata of {failed} issuer(s) cannot be used"
        )))
    }
}
