//! `peergate admin …`: administrators, their budgets and their admin API access.

use super::{CACHE_NOTE, CliError, DataDir, admins_with_usage, on_store, read_password};
use crate::admin::{AdminChange, BudgetChange, Caller, NewPassword};
use crate::clock::rfc3339_millis;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub(super) enum AdminCommand {
    /// Add an administrator. The password is read from standard input (one line), or asked for
    /// when standard input is a terminal; never taken from the command line.
    Add {
        /// Name (also the Basic login): 1 to 64 of letters, digits and ._-
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// List administrators, their status and budgets. Never a secret.
    List {
        /// A JSON array, one object per administrator.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataDir,
    },
    /// Disable an administrator: no more sign-ins, their tokens stop, their peers' messages are
    /// refused.
    Disable {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Enable a disabled administrator again (their old tokens stay revoked).
    Enable {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Make an administrator an auditor (`auditor`: reads peers, usage, audit and
    /// conversations on the admin API, changes nothing) or a full administrator (`admin`).
    Role {
        /// The administrator's name.
        name: String,
        /// `auditor` or `admin`.
        #[arg(value_name = "auditor|admin")]
        role: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Revoke every admin API token of an administrator (after a leak); their password and
    /// peers stay.
    RevokeTokens {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Set an administrator's password (read like `admin add`).
    Password {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Issue an administrator token for the admin API and print it, alone, on stdout. It is
    /// shown only this once.
    Token {
        /// The administrator's name.
        name: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Set an administrator's model switch and token budgets.
    Budget {
        /// The administrator's name.
        name: String,
        /// Allow or forbid the model for this administrator's peers.
        #[arg(long, value_parser = ["allow", "forbid"])]
        model: Option<String>,
        /// Tokens per UTC day.
        #[arg(long, value_name = "N")]
        tokens_per_day: Option<u64>,
        /// Tokens per UTC month, or `default` for the policy's.
        #[arg(long, value_name = "N|default")]
        tokens_per_month: Option<String>,
        #[command(flatten)]
        data: DataDir,
    },
    /// Bind an administrator to their subject at the organisation's identity provider
    /// (`[admin.issuer]`): its access tokens for the admin API then sign them in.
    Bind {
        /// The administrator's name.
        name: String,
        /// The token's client_id (else its sub) that names them.
        #[arg(long, value_name = "VALUE")]
        subject: String,
        /// The provider, as `[admin.issuer] name` names it.
        #[arg(long, value_name = "NAME", default_value = "admin")]
        issuer: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Unbind an administrator's subject (the same arguments as `admin bind`).
    Unbind {
        /// The administrator's name.
        name: String,
        /// The subject to unbind.
        #[arg(long, value_name = "VALUE")]
        subject: String,
        /// The provider, as `[admin.issuer] name` names it.
        #[arg(long, value_name = "NAME", default_value = "admin")]
        issuer: String,
        #[command(flatten)]
        data: DataDir,
    },
    /// Print the admin API's OpenAPI document (the same the admin listener serves).
    Openapi,
}

pub(super) async fn run(command: AdminCommand) -> Result<(), CliError> {
    let operator = Caller::operator();
    match command {
        AdminCommand::Add { name, data } => add(&operator, &name, &data).await,
        AdminCommand::List { json, data } => {
            let listed = on_store(&data, None, admins_with_usage).await?;
            match json {
                true => println!("{}", admins_json(&listed)),
                false => print_admins(listed),
            }
            Ok(())
        }
        AdminCommand::Disable { name, data } => {
            change(&name, &data, AdminChange::Disable).await?;
            eprintln!(
                "disabled administrator {name}: no more sign-ins, their tokens stopped, their peers' messages are refused. {CACHE_NOTE}"
            );
            Ok(())
        }
        AdminCommand::Enable { name, data } => {
            change(&name, &data, AdminChange::Enable).await?;
            eprintln!("enabled administrator {name}. {CACHE_NOTE}");
            Ok(())
        }
        AdminCommand::Role { name, role, data } => set_role(&name, &role, &data).await,
        AdminCommand::RevokeTokens { name, data } => {
            change(&name, &data, AdminChange::RevokeTokens).await?;
            eprintln!(
                "revoked every admin API token of {name}; the next request with one is refused."
            );
            Ok(())
        }
        AdminCommand::Bind {
            name,
            subject,
            issuer,
            data,
        } => bind(&name, (&issuer, &subject), true, &data).await,
        AdminCommand::Unbind {
            name,
            subject,
            issuer,
            data,
        } => bind(&name, (&issuer, &subject), false, &data).await,
        AdminCommand::Password { name, data } => set_password(&operator, &name, &data).await,
        AdminCommand::Token { name, data } => issue_token(&operator, &name, &data).await,
        AdminCommand::Budget {
            name,
            model,
            tokens_per_day,
            tokens_per_month,
            data,
        } => {
            set_budget(
                &name,
                model,
                tokens_per_day,
                tokens_per_month.as_deref(),
                &data,
            )
            .await
        }
        AdminCommand::Openapi => {
            let document = crate::http::admin_api::openapi()
                .to_pretty_json()
                .map_err(|e| CliError::new(e.to_string()))?;
            println!("{document}");
            Ok(())
        }
    }
}

/// Applies one change to the administrator `name`, as the operator.
async fn change(
    name: &str,
    data: &DataDir,
    change: AdminChange,
) -> Result<crate::store::AdminRecord, CliError> {
    on_store(data, None, async |accounts| {
        accounts
            .change_admin(&Caller::operator(), name, change)
            .await
    })
    .await
}

/// `admin add`: an administrator with a password read from the terminal or stdin.
async fn add(operator: &Caller, name: &str, data: &DataDir) -> Result<(), CliError> {
    let password = read_password(&format!("administrator {name}"))?;
    let added = super::on_new_or_existing_store(data, None, async |accounts| {
        accounts.add_admin(operator, name, Some(password)).await
    })
    .await?;
    eprintln!(
        "added administrator {name} ({}); password stored as an Argon2id hash.",
        added.id
    );
    Ok(())
}

/// `admin password`: a new password, read as `admin add` reads one.
async fn set_password(operator: &Caller, name: &str, data: &DataDir) -> Result<(), CliError> {
    let password = read_password(&format!("administrator {name}"))?;
    on_store(data, None, async |accounts| {
        accounts
            .change_admin(operator, name, AdminChange::Password(NewPassword(password)))
            .await
    })
    .await?;
    eprintln!("password set for administrator {name} (stored as an Argon2id hash).");
    Ok(())
}

/// `admin token`: an admin API token, printed once on stdout.
async fn issue_token(operator: &Caller, name: &str, data: &DataDir) -> Result<(), CliError> {
    let token = on_store(data, None, async |accounts| {
        accounts.issue_admin_token(operator, name).await
    })
    .await?;
    eprintln!("issued an admin API token for {name}. It is on stdout and is not shown again.");
    println!("{token}");
    Ok(())
}

/// `admin budget`: changes what the administrator's peers may spend on the model.
async fn set_budget(
    name: &str,
    model: Option<String>,
    tokens_per_day: Option<u64>,
    tokens_per_month: Option<&str>,
    data: &DataDir,
) -> Result<(), CliError> {
    let operator = Caller::operator();
    let tokens_per_month = match tokens_per_month {
        None => None,
        Some("default") => Some(None),
        Some(n) => Some(Some(n.parse::<u64>().map_err(|_| {
            CliError::new(format!(
                "--tokens-per-month: expected a number of tokens or `default` (got {n:?})"
            ))
        })?)),
    };
    let change = BudgetChange {
        model_allowed: model.map(|m| m == "allow"),
        tokens_per_day,
        tokens_per_month,
    };
    let admin = on_store(data, None, async |accounts| {
        accounts
            .change_admin(&operator, name, AdminChange::Budget(change))
            .await
    })
    .await?;
    eprintln!(
        "administrator {name}: {}. {CACHE_NOTE}",
        crate::admin::service::describe_budget(&admin)
    );
    Ok(())
}

/// `admin bind` (`bound`) and `admin unbind`: an identity provider's subject and the
/// administrator it signs in.
async fn bind(
    name: &str,
    (issuer, subject): (&str, &str),
    bound: bool,
    data: &DataDir,
) -> Result<(), CliError> {
    let operator = Caller::operator();
    let (issuer_name, subject_name) = (issuer.to_owned(), subject.to_owned());
    let change = match bound {
        true => AdminChange::BindIdentity {
            issuer: issuer_name,
            subject: subject_name,
        },
        false => AdminChange::UnbindIdentity {
            issuer: issuer_name,
            subject: subject_name,
        },
    };
    on_store(data, None, async |accounts| {
        accounts.change_admin(&operator, name, change).await
    })
    .await?;
    if bound {
        eprintln!("bound token {issuer}:{subject} to administrator {name}.");
    } else {
        eprintln!("unbound token {issuer}:{subject} from administrator {name}. {CACHE_NOTE}");
    }
    Ok(())
}

/// The administrator table: never a secret.
/// `admin role NAME auditor|admin`.
async fn set_role(name: &str, role: &str, data: &DataDir) -> Result<(), CliError> {
    let auditor = match role {
        "auditor" => true,
        "admin" => false,
        _ => {
            return Err(CliError::new(format!(
                "cannot read {role:?}: give auditor (reads, changes nothing) or admin"
            )));
        }
    };
    on_store(data, None, async |accounts| {
        accounts
            .change_admin(&Caller::operator(), name, AdminChange::Auditor(auditor))
            .await
    })
    .await?;
    eprintln!("administrator {name} is now {role}. {CACHE_NOTE}");
    Ok(())
}

/// The administrators as JSON: what the table shows.
fn admins_json(listed: &[(crate::store::AdminRecord, u64)]) -> serde_json::Value {
    let listed: Vec<serde_json::Value> = listed
        .iter()
        .map(|(admin, today)| {
            serde_json::json!({
                "name": admin.name, "status": admin.status.to_string(),
                "role": if admin.auditor { "auditor" } else { "admin" },
                "passwordSet": admin.has_password, "modelAllowed": admin.model_allowed,
                "tokensPerDay": admin.tokens_per_day, "tokensPerMonth": admin.tokens_per_month,
                "tokensToday": today, "createdAt": rfc3339_millis(admin.created_at),
            })
        })
        .collect();
    serde_json::Value::Array(listed)
}

fn print_admins(listed: Vec<(crate::store::AdminRecord, u64)>) {
    println!(
        "{:<24} {:<9} {:<9} {:<9} {:>16} {:>16} {:>12}  {:<24}",
        "NAME",
        "STATUS",
        "PASSWORD",
        "MODEL",
        "TOKENS/DAY",
        "TOKENS/MONTH",
        "USED TODAY",
        "CREATED"
    );
    let show = |n: Option<u64>| n.map_or_else(|| "default".to_owned(), |n| n.to_string());
    for (admin, today) in listed {
        println!(
            "{:<24} {:<9} {:<9} {:<9} {:>16} {:>16} {:>12}  {:<24}",
            admin.name,
            admin.status,
            if admin.has_password { "set" } else { "none" },
            if admin.model_allowed {
                "allowed"
            } else {
                "forbidden"
            },
            show(admin.tokens_per_day),
            show(admin.tokens_per_month),
            today,
            rfc3339_millis(admin.created_at),
        );
    }
}
