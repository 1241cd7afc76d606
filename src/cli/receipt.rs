//! `peergate receipt …`: checking an agent's answer receipts, offline, as a partner or an
//! auditor would.

use super::CliError;
use super::fetching::{CardKeyArgs, CardKeys, ReachArgs, document};
use crate::jose::receipt::{self, EXTENSION, Expected};
use crate::jose::verify::TrustedKeys;
use clap::Subcommand;
use serde_json::Value;

#[derive(Debug, Subcommand)]
pub(super) enum ReceiptCommand {
    /// Verify a finished task's receipt: the agent's card (with the keys you give, as `card
    /// verify`), then the receipt with the receipt keys that card names (type, algorithm, key,
    /// signature, issuer, audience, time), then its digests against the message you sent and
    /// the task you received. Exits 0 only when every check holds, naming each.
    Verify {
        /// The task as received: a Task, a SendMessage or GetTask answer (JSON-RPC or
        /// HTTP+JSON). Its metadata holds the receipt unless `--receipt` gives it.
        #[arg(long, value_name = "FILE")]
        task: String,
        /// The message sent: a Message, SendMessage params, or the JSON-RPC request.
        #[arg(long, value_name = "FILE")]
        request: String,
        /// The receipt, when kept apart from the task (a file holding the compact JWS).
        #[arg(long, value_name = "FILE")]
        receipt: Option<String>,
        /// The agent's card: an https URL or a saved file.
        #[arg(long, value_name = "FILE|URL")]
        card: String,
        /// Your peer id, which the receipt must be made for (`aud`).
        #[arg(long, value_name = "ID")]
        peer_id: Option<String>,
        #[command(flatten)]
        keys: CardKeyArgs,
        #[command(flatten)]
        reach: ReachArgs,
    },
}

pub(super) async fn run(command: ReceiptCommand) -> Result<(), CliError> {
    let ReceiptCommand::Verify {
        task,
        request,
        receipt,
        card,
        peer_id,
        keys,
        reach,
    } = command;
    let fetcher = reach.fetcher(&crate::net::tls::default_client_config()?)?;
    let card_text = document(&fetcher, &card).await?;
    let card_keys = CardKeys::new(&keys, fetcher.clone(), &reach.trust(None));
    if card_keys.none_named() {
        return Err(failed(
            "no keys for the card: give --jwks FILE|URL or --secret",
        ));
    }
    let verified = (card_keys.verify(&card_text).await?)
        .map_err(|e| failed(&format!("card not verified: {e}")))?;
    println!("card: verified (kid {})", verified.kid);
    let card: Value = serde_json::from_str(&card_text).map_err(|_| failed("card: not JSON"))?;
    let (issuer, trusted) = receipt_keys(&card, &fetcher).await?;
    let task = answered_task(&read_json(&task)?)?;
    let jws = match receipt {
        Some(file) => read_text(&file)?.trim().to_owned(),
        None => (task["metadata"][EXTENSION].as_str())
            .ok_or_else(|| failed("the task holds no receipt (give --receipt)"))?
            .to_owned(),
    };
    let expected = Expected {
        issuer: &issuer,
        audience: peer_id.as_deref(),
        now: crate::clock::Clock::now(&crate::clock::SystemClock),
    };
    let claims = receipt::verify(&jws, &trusted, expected)
        .map_err(|e| failed(&format!("receipt not verified: {e}")))?;
    println!("receipt: verified (issuer {issuer}, jti {})", claims["jti"]);
    let sent = sent_message(&read_json(&request)?)?;
    compare(
        "request",
        &claims["dig"]["req"],
        &receipt::message_digest(&sent),
    )?;
    let answer = receipt::answer_digest(&task);
    compare("answer", &claims["dig"]["ans"], &answer)?;
    println!(
        "states: {} {} task {} {} at {}",
        claims["a2a"]["binding"].as_str().unwrap_or("?"),
        claims["a2a"]["method"].as_str().unwrap_or("?"),
        claims["a2a"]["task"].as_str().unwrap_or("?"),
        claims["a2a"]["state"].as_str().unwrap_or("?"),
        claims["a2a"]["answered"].as_str().unwrap_or("?"),
    );
    Ok(())
}

/// The issuer the card's receipts name (its door's origin) and the keys its receipts
/// extension names, taken from the key set it points at: only kids the signed card lists.
async fn receipt_keys(
    card: &Value,
    fetcher: &crate::jose::fetch::Fetcher,
) -> Result<(String, TrustedKeys), CliError> {
    let extension = (card["capabilities"]["extensions"].as_array())
        .and_then(|all| all.iter().find(|e| e["uri"] == EXTENSION))
        .ok_or_else(|| failed("the card declares no receipts"))?;
    let params = &extension["params"];
    let jwks_uri =
        (params["jwksUri"].as_str()).ok_or_else(|| failed("the card names no jwksUri"))?;
    let kids: Vec<&str> = (params["kids"].as_array())
        .map(|kids| kids.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let jwks: Value = serde_json::from_str(&document(fetcher, jwks_uri).await?)
        .map_err(|_| failed("the receipt key set is not JSON"))?;
    let named: Vec<&Value> = (jwks["keys"].as_array().into_iter().flatten())
        .filter(|key| key["kid"].as_str().is_some_and(|kid| kids.contains(&kid)))
        .collect();
    let mut trusted = TrustedKeys::new();
    trusted
        .add_jwks(&serde_json::json!({"keys": named}).to_string())
        .map_err(|e| failed(&format!("the receipt keys: {e}")))?;
    let door = card["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap_or_default();
    let issuer = reqwest::Url::parse(door)
        .map(|url| url.origin().ascii_serialization())
        .map_err(|_| failed("the card names no door URL"))?;
    Ok((issuer, trusted))
}

/// The task in an answer as a partner keeps it: a Task, `{"task": …}`, or a JSON-RPC response
/// holding either.
fn answered_task(answer: &Value) -> Result<Value, CliError> {
    let answer = answer.get("result").unwrap_or(answer);
    let task = answer.get("task").unwrap_or(answer);
    match task.get("id").and(task.get("status")) {
        Some(_) => Ok(task.clone()),
        None => Err(failed("--task holds no task")),
    }
}

/// The message sent: a Message, `{"message": …}` (SendMessage params), or the JSON-RPC request.
fn sent_message(request: &Value) -> Result<Value, CliError> {
    let request = request.get("params").unwrap_or(request);
    let message = request.get("message").unwrap_or(request);
    match message.get("messageId") {
        Some(_) => Ok(message.clone()),
        None => Err(failed("--request holds no message")),
    }
}

fn compare(
    what: &str,
    stated: &Value,
    computed: &Result<String, receipt::ReceiptError>,
) -> Result<(), CliError> {
    let computed = computed
        .as_ref()
        .map_err(|e| failed(&format!("{what}: {e}")))?;
    if stated.as_str() != Some(computed.as_str()) {
        return Err(failed(&format!(
            "{what}: the receipt states another digest than this {what}'s: it is not the {what} the receipt was made for"
        )));
    }
    println!("{what}: digest matches");
    Ok(())
}

fn read_text(file: &str) -> Result<String, CliError> {
    std::fs::read_to_string(file)
        .map_err(|e| CliError::new(format!("cannot read {file}: {}", e.kind())))
}

fn read_json(file: &str) -> Result<Value, CliError> {
    serde_json::from_str(&read_text(file)?).map_err(|_| CliError::new(format!("{file}: not JSON")))
}

fn failed(why: &str) -> CliError {
    CliError::new(why.to_owned())
}
