//! `peergate receipt …`: checking an agent's answer receipts, offline, as a partner or an
//! auditor would.

use super::CliError;
use super::fetching::{CardKeyArgs, CardKeys, ReachArgs, document};
use super::receipt_log::DeclaredLog;
use crate::jose::receipt::{self, EXTENSION, Expected};
use clap::Subcommand;
use serde_json::Value;

#[derive(Debug, Subcommand)]
pub(super) enum ReceiptCommand {
    /// Verify a finished task's receipt, offline: the agent's card (with the keys you give, as
    /// `card verify`), then the receipt with those keys, only one whose kid the card names for
    /// receipts (type, algorithm, key, signature, issuer, audience, time), then its digests
    /// against the message you sent and the task you received. Exits 0 only when every check
    /// holds, naming each.
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
        /// A stream's events as received (the stream's text as served, or a JSON array of the
        /// events or their JSON-RPC responses), checked against the receipt's `evt` chain.
        #[arg(long, value_name = "FILE")]
        events: Option<String>,
        /// The receipt's inclusion proof in the agent's answer log (a `c2sp.org/tlog-proof@v1`
        /// file, or its URL, which the output names): checked against a checkpoint signed with
        /// the log key the card names.
        #[arg(long, value_name = "FILE|URL")]
        proof: Option<String>,
        /// Keep the last checkpoint of each log here, and refuse a checkpoint not consistent
        /// with it (proven from the log's tiles; both are then kept here as evidence).
        #[arg(long, value_name = "DIR", requires = "proof")]
        checkpoints: Option<std::path::PathBuf>,
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
        events,
        proof,
        checkpoints,
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
    let (issuer, kids, params) = receipt_terms(&card)?;
    let task = answered_task(&read_json(&task)?)?;
    let jws = match receipt {
        Some(file) => read_text(&file)?.trim().to_owned(),
        None => (task["metadata"][EXTENSION].as_str())
            .ok_or_else(|| failed("the task holds no receipt (give --receipt)"))?
            .to_owned(),
    };
    // Offline: the keys you gave for the card, and of them only one the card names for receipts.
    if !header_kid(&jws).is_some_and(|kid| kids.contains(&kid)) {
        return Err(failed(
            "receipt not verified: signed with a key the card does not name for receipts",
        ));
    }
    let trusted = card_keys.trusted().await?;
    let expected = Expected {
        issuer: &issuer,
        audience: peer_id.as_deref(),
        now: crate::clock::Clock::now(&crate::clock::SystemClock),
    };
    let claims = receipt::verify(&jws, &trusted, expected)
        .map_err(|e| failed(&format!("receipt not verified: {e}")))?;
    println!("receipt: verified (issuer {issuer}, jti {})", claims["jti"]);
    match &peer_id {
        Some(peer) => println!("audience: {peer}"),
        None => println!(
            "audience: not checked (made for peer {}; give --peer-id to check it is yours)",
            claims["aud"]
        ),
    }
    let served = crate::jose::receipt::sha256_b64url(card_text.as_bytes());
    match claims["card"].as_str() == Some(served.as_str()) {
        true => println!("card: the one in force when the task finished"),
        false => println!("card: another than this one was in force when the task finished"),
    }
    digests(&claims, (&request, &task), events.as_deref())?;
    match (DeclaredLog::of(&params)?, proof) {
        (Some(log), Some(proof)) => {
            log.check(&fetcher, (&jws, &proof), checkpoints.as_deref())
                .await?;
        }
        (Some(log), None) => println!(
            "log: not checked (its proof: {}; give --proof)",
            log.proof_url(claims["jti"].as_str().unwrap_or_default())
        ),
        (None, Some(_)) => return Err(failed("--proof: the card declares no answer log")),
        (None, None) => {}
    }
    Ok(())
}

/// Checks the receipt's digests against the request sent, the task received and, for a
/// stream, the events received; names each that holds.
fn digests(
    claims: &Value,
    (request, task): (&str, &Value),
    events: Option<&str>,
) -> Result<(), CliError> {
    let sent = sent_message(&read_json(request)?)?;
    compare(
        "request",
        &claims["dig"]["req"],
        &receipt::message_digest(&sent),
    )?;
    let answer = receipt::answer_digest(task);
    compare("answer", &claims["dig"]["ans"], &answer)?;
    match (&claims["dig"]["evt"], events) {
        (Value::Null, None) => {}
        (Value::Null, Some(_)) => return Err(failed("events: the receipt covers no stream")),
        (_, None) => println!("events: not checked (the receipt covers a stream; give --events)"),
        (stated, Some(file)) => {
            let chain = stream_events(&read_text(file)?)?;
            if *stated != chain {
                return Err(failed(
                    "events: the receipt states another chain: an event was dropped, repeated, reordered or changed",
                ));
            }
            println!(
                "events: the {} events chain as the receipt states",
                stated["n"]
            );
        }
    }
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

/// The issuer the card's receipts name (its door's origin), the key ids its receipts
/// extension lists (a receipt is checked only with a key the signed card names), and the
/// extension's parameters.
fn receipt_terms(card: &Value) -> Result<(String, Vec<String>, Value), CliError> {
    let extension = (card["capabilities"]["extensions"].as_array())
        .and_then(|all| all.iter().find(|e| e["uri"] == EXTENSION))
        .ok_or_else(|| failed("the card declares no receipts"))?;
    let kids: Vec<String> = (extension["params"]["kids"].as_array())
        .map(|kids| {
            kids.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let door = card["supportedInterfaces"][0]["url"]
        .as_str()
        .unwrap_or_default();
    let issuer = reqwest::Url::parse(door)
        .map(|url| url.origin().ascii_serialization())
        .map_err(|_| failed("the card names no door URL"))?;
    Ok((issuer, kids, extension["params"].clone()))
}

/// The `evt` chain of a stream as received: its text as served (`data:` lines), or a JSON array
/// of the events (each a `StreamResponse` or the JSON-RPC response holding one).
fn stream_events(text: &str) -> Result<Value, CliError> {
    let events: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(events)) => events,
        _ => text
            .split("\n\n")
            .filter_map(|event| event.lines().find_map(|l| l.strip_prefix("data:")))
            .map(|data| serde_json::from_str(data.trim()))
            .collect::<Result<_, _>>()
            .map_err(|_| failed("--events: an event is not JSON"))?,
    };
    let mut chain = receipt::EventChain::default();
    for event in events {
        let event = event.get("result").cloned().unwrap_or(event);
        chain
            .add(&event)
            .map_err(|e| failed(&format!("--events: {e}")))?;
    }
    chain.claim().map_err(|e| failed(&format!("--events: {e}")))
}

/// The `kid` in a receipt's header, read before anything is trusted of it.
fn header_kid(jws: &str) -> Option<String> {
    use base64::Engine as _;
    let header = jws.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()?;
    let header: Value = serde_json::from_slice(&bytes).ok()?;
    header["kid"].as_str().map(str::to_owned)
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
