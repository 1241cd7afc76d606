//! What passed through the door, read by the operator from the store: conversations (a page at
//! a time, by owner, peer and time), one task as `GetTask` answers it, and usage per owner and
//! peer by day or month. Every listing prints a table, or JSON with `--json`.

use super::{CliError, DataDir, on_store, parse_when};
use crate::admin::Caller;
use crate::admin::service::read_period;
use crate::clock::{Clock, SystemClock, rfc3339_millis};
use crate::store::{ConversationCursor, ConversationQuery};
use clap::Subcommand;
use serde_json::{Value, json};

/// `peergate conversations …`
#[derive(Debug, Subcommand)]
pub(super) enum ConversationsCommand {
    /// List conversations, latest first (then by peer and contextId), a page at a time.
    List {
        /// Only this administrator's peers' [default: every owner's].
        #[arg(long, value_name = "NAME")]
        owner: Option<String>,
        /// Only this peer's.
        #[arg(long, value_name = "NAME")]
        peer: Option<String>,
        /// Last message at or after: RFC 3339, a date, or an age such as 24h or 7d.
        #[arg(long, value_name = "WHEN")]
        since: Option<String>,
        /// Last message before (same forms).
        #[arg(long, value_name = "WHEN")]
        until: Option<String>,
        /// At most this many (1 to 500).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=500))]
        limit: u32,
        /// Where the page starts: the cursor a previous page printed.
        #[arg(long, value_name = "CURSOR")]
        cursor: Option<String>,
        /// One JSON object, as the admin API answers.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataDir,
    },
    /// Print one conversation: every message, with every part it carried.
    Show {
        /// The peer's name.
        peer: String,
        /// The conversation's contextId.
        context_id: String,
        /// One JSON object, as the admin API answers.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        data: DataDir,
    },
}

/// `peergate conversations …`
pub(super) async fn conversations(command: ConversationsCommand) -> Result<(), CliError> {
    match command {
        ConversationsCommand::List {
            owner,
            peer,
            since,
            until,
            limit,
            cursor,
            json,
            data,
        } => {
            let now = SystemClock.now();
            let when = |text: Option<String>| {
                text.map(|t| parse_when(&t, now, crate::clock::Relative::Ago))
                    .transpose()
            };
            let after = cursor
                .map(|c| {
                    ConversationCursor::parse(&c).ok_or_else(|| {
                        CliError::new("--cursor: not a cursor a listing printed".to_owned())
                    })
                })
                .transpose()?;
            let mut query = ConversationQuery {
                owner_id: None,
                peer,
                since: when(since)?,
                until: when(until)?,
                after,
                limit,
            };
            let list = on_store(&data, None, async |accounts| {
                query.owner_id = match owner {
                    Some(name) => Some(accounts.admin_id(&name).await?),
                    None => None,
                };
                accounts.conversations(&Caller::operator(), query).await
            })
            .await?;
            print_conversations(list, json);
            Ok(())
        }
        ConversationsCommand::Show {
            peer,
            context_id,
            json,
            data,
        } => {
            let messages = on_store(&data, None, async |accounts| {
                accounts
                    .conversation(&Caller::operator(), &peer, &context_id)
                    .await
            })
            .await?;
            print_conversation(&peer, &context_id, messages, json);
            Ok(())
        }
    }
}

fn print_conversations(page: crate::admin::service::ConversationPage, json: bool) {
    let (list, next) = (page.conversations, page.next.map(|next| next.to_text()));
    if json {
        let conversations: Vec<Value> = list
            .iter()
            .map(|c| {
                json!({"peer": c.peer_name, "contextId": c.context_id,
                       "createdAt": rfc3339_millis(c.created_at),
                       "updatedAt": rfc3339_millis(c.updated_at), "messages": c.messages})
            })
            .collect();
        let mut page = json!({"conversations": conversations});
        if let Some(next) = next {
            page["next"] = json!(next);
        }
        println!("{page}");
        return;
    }
    println!(
        "{:<24} {:<40} {:<24} {:>8}",
        "PEER", "CONTEXT", "LAST MESSAGE", "MESSAGES"
    );
    for c in &list {
        println!(
            "{:<24} {:<40} {:<24} {:>8}",
            c.peer_name,
            c.context_id,
            rfc3339_millis(c.updated_at),
            c.messages
        );
    }
    if let Some(next) = next {
        eprintln!("more: --cursor {next}");
    }
}

fn print_conversation(
    peer: &str,
    context_id: &str,
    messages: Vec<crate::store::ConversationEntry>,
    json: bool,
) {
    if json {
        let messages: Vec<Value> = messages
            .into_iter()
            .map(|m| {
                let mut one = json!({"role": m.role, "text": m.text, "taskId": m.task_id,
                                     "at": rfc3339_millis(m.at)});
                if let Some(parts) = m.parts {
                    one["parts"] = parts;
                }
                one
            })
            .collect();
        println!(
            "{}",
            json!({"peer": peer, "contextId": context_id, "messages": messages})
        );
        return;
    }
    for m in messages {
        println!(
            "{}  {:<5}  task {}",
            rfc3339_millis(m.at),
            m.role,
            m.task_id
        );
        match m.parts.as_ref().and_then(Value::as_array) {
            Some(parts) => parts
                .iter()
                .for_each(|part| println!("  {}", describe_part(part))),
            None => println!("  {}", m.text),
        }
    }
}

/// One part in a line: text as it is, data as JSON, a file by name, type, size and digest.
fn describe_part(part: &Value) -> String {
    match part["kind"].as_str() {
        Some("text") => part["text"].as_str().unwrap_or_default().to_owned(),
        Some("data") => format!("data: {}", part["data"]),
        _ => {
            let mut said = vec![format!(
                "file {}",
                part["filename"].as_str().unwrap_or("(unnamed)")
            )];
            for key in ["mediaType", "url"] {
                if let Some(value) = part[key].as_str() {
                    said.push(value.to_owned());
                }
            }
            if let Some(size) = part["size"].as_u64() {
                said.push(format!("{size} bytes"));
            }
            if let Some(digest) = part["sha256"].as_str() {
                said.push(format!("sha256 {digest}"));
            }
            if part["contentOmitted"] == json!(true) {
                said.push("content not kept".to_owned());
            }
            said.join(", ")
        }
    }
}

/// `peergate task …`
#[derive(Debug, Subcommand)]
pub(super) enum TaskCommand {
    /// Print a task of a peer as `GetTask` answers it (JSON), while the gateway keeps it.
    Show {
        /// The peer's name.
        peer: String,
        /// The task's id.
        task_id: String,
        #[command(flatten)]
        data: DataDir,
    },
}

/// `peergate task show PEER TASK_ID`: the task as `GetTask` answers its peer, as JSON.
pub(super) async fn show_task(peer: &str, task_id: &str, data: &DataDir) -> Result<(), CliError> {
    let task = on_store(data, None, async |accounts| {
        accounts.task(&Caller::operator(), peer, task_id).await
    })
    .await?;
    println!("{task:#}");
    Ok(())
}

/// `peergate usage`: tokens and answered requests per owner and peer in a UTC day or month.
pub(super) async fn usage(
    owner: Option<String>,
    period: Option<String>,
    json: bool,
    data: &DataDir,
) -> Result<(), CliError> {
    let period = match period {
        Some(period) => {
            read_period(&period).map_err(|e| CliError::new(format!("--period: {e}")))?
        }
        None => crate::clock::UtcDay::of(SystemClock.now()).into(),
    };
    let report = on_store(data, None, async |accounts| {
        let caller = Caller::operator();
        if let Some(name) = &owner {
            // An owner that does not exist is named, not reported as spending nothing.
            accounts.admin_id(name).await?;
        }
        let mut report = Vec::new();
        for admin in accounts.list_admins().await? {
            if owner.as_ref().is_some_and(|name| *name != admin.name) {
                continue;
            }
            let (tokens, peers) = accounts.usage(&caller, &admin.id, period).await?;
            report.push((admin.name, tokens, peers));
        }
        Ok(report)
    })
    .await?;
    if json {
        let owners: Vec<Value> = report
            .iter()
            .map(|(name, tokens, peers)| {
                let peers: Vec<Value> = peers
                    .iter()
                    .map(|p| json!({"peer": p.peer_name, "tokens": p.tokens, "requests": p.requests}))
                    .collect();
                json!({"owner": name, "tokens": tokens, "peers": peers})
            })
            .collect();
        println!(
            "{}",
            json!({"period": period.to_string(), "owners": owners})
        );
        return Ok(());
    }
    println!(
        "{:<24} {:<24} {:>14} {:>10}",
        "OWNER", "PEER", "TOKENS", "REQUESTS"
    );
    for (name, tokens, peers) in report {
        println!("{name:<24} {:<24} {tokens:>14} {:>10}", "(all)", "");
        for p in peers {
            println!(
                "{:<24} {:<24} {:>14} {:>10}",
                "", p.peer_name, p.tokens, p.requests
            );
        }
    }
    Ok(())
}
