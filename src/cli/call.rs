//! `peergate call`: the client side. Reads an agent's card, verifies its signature with keys the
//! caller names, and sends one message over the JSON-RPC interface the card advertises.
//!
//! What the design rules out:
//! * a forged or altered card steering the credential elsewhere: without a verified signature
//!   (`--insecure-unsigned`), the interface must be on the card's own origin;
//! * the credential crossing a network in clear: `http://` is used only to loopback, and only
//!   under `--dangerous-allow-http-loopback`;
//! * the caller's machine being used against its own network: every URL (the card, its key
//!   sets, the token endpoint, the agent) goes through one guarded client
//!   ([`crate::jose::fetch::Fetcher`]), shared with `peergate card verify`, which refuses
//!   private, link-local and metadata addresses unless `--allow-private-network`;
//! * the credential leaving through a redirect: none is followed;
//! * a hostile agent exhausting memory: every body read is bounded.

use super::CliError;
use super::exit_status::*;
use super::fetching::{CardKeyArgs, CardKeys, ReachArgs};
use crate::jose::fetch::Fetcher;
use crate::jose::verify::VerifyError;
use crate::net::event_stream::ServerSentEvents;
use crate::protocol::shown_text::{printable, printable_json};
use clap::Args;
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

/// Largest answer read.
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, Args)]
pub(super) struct CallArgs {
    /// The agent: its base URL (the card is read from /.well-known/agent-card.json) or the URL
    /// of its card (ending in .json).
    url: String,
    /// The message to send.
    text: String,
    /// A bearer token (or set PEERGATE_TOKEN, which keeps it out of the process list).
    #[arg(long, env = "PEERGATE_TOKEN", hide_env_values = true, conflicts_with_all = ["basic", "api_key"])]
    token: Option<String>,
    /// Basic authentication as USER; the password is read from standard input (or prompted).
    #[arg(long, value_name = "USER", conflicts_with = "api_key")]
    basic: Option<String>,
    /// An API key, sent in the header the card's apiKey scheme names (or set PEERGATE_API_KEY).
    #[arg(long, env = "PEERGATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Continue this conversation (the context id a previous call printed).
    #[arg(long, value_name = "ID")]
    context: Option<String>,
    /// Answer this task (one waiting for input).
    #[arg(long, value_name = "ID")]
    task: Option<String>,
    /// Stream the answer as it is written (SendStreamingMessage).
    #[arg(long)]
    stream: bool,
    /// Print the whole JSON-RPC result instead of the answer's text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    keys: CardKeyArgs,
    /// INSECURE: use a card that carries no signature, or whose signature cannot be checked for
    /// want of keys. A signature that fails against the keys given is still refused.
    #[arg(long)]
    insecure_unsigned: bool,
    /// A PEM file of CA certificates trusted besides the system's roots.
    #[arg(long, visible_alias = "ca", value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Get an access token from the agent's identity provider with this client id (OAuth 2.0
    /// client credentials), at the token URL the verified card names or --token-url.
    #[arg(long, value_name = "ID", conflicts_with_all = ["token", "basic", "api_key"])]
    client_id: Option<String>,
    /// The environment variable holding the client secret (never the secret itself).
    #[arg(long, value_name = "VAR", requires = "client_id")]
    client_secret_env: Option<String>,
    /// The scopes to ask for [default: a2a:message a2a:tasks:read].
    #[arg(long, value_name = "SCOPES", requires = "client_id")]
    scope: Option<String>,
    /// The provider's token endpoint, instead of the one the card names.
    #[arg(long, value_name = "URL", requires = "client_id")]
    token_url: Option<String>,
    /// A client certificate (PEM, leaf first) to present when the agent asks for one.
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Send the credential to the card's interface even when it is on another origin than the
    /// card (by default it goes only to the origin whose card was verified).
    #[arg(long)]
    allow_other_origin: bool,
    /// How long to wait for the answer, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    timeout: u64,
    /// Ask for the agent's answer receipt (the call names its extension) and keep it in DIR
    /// with what `peergate receipt verify` checks it against: DIR/<task>.receipt,
    /// <task>.request.json and <task>.task.json.
    #[arg(long, value_name = "DIR", conflicts_with = "stream")]
    keep_receipt: Option<PathBuf>,
    #[command(flatten)]
    reach: ReachArgs,
}

pub(super) async fn run(args: CallArgs) -> Result<(), CliError> {
    let fetcher = fetcher(&args)?;
    let card_url = card_url(&args.url)?;
    let card_text = fetcher
        .text(&card_url)
        .await
        .map_err(|e| exit(EXIT_OTHER, format!("cannot read the card: {e}")))?;
    let keys = CardKeys::new(
        &args.keys,
        fetcher.clone(),
        &args.reach.trust(args.ca_file.as_deref()),
    );
    let (interface, verified) = check_card(&keys, &args, &card_text).await?;
    let endpoint = endpoint(&interface, &card_url, verified, args.allow_other_origin)?;
    let client = fetcher.client_for(&endpoint).map_err(|why| {
        exit(
            EXIT_OTHER,
            format!(
                "the card's interface {}: {why}",
                crate::jose::fetch::shown_url(&endpoint)
            ),
        )
    })?;
    let credential = credential(&args, &interface.card, &fetcher, verified).await?;
    let request = request_body(&args);
    let mut response = send(client, &endpoint, (&args, &request), &credential).await?;
    // Only client credentials and no token URL: the 401 says where a token comes from, once.
    if response.status() == 401 && matches!(credential, Credential::Discover) {
        let token =
            discovered_token(&fetcher, (&args, &interface.card), &response, &endpoint).await?;
        let credential = Credential::Bearer(token);
        response = send(client, &endpoint, (&args, &request), &credential).await?;
    }
    refused(&response)?;
    answer(response, (&args, &request)).await
}

/// The call sent once, with `credential`.
async fn send(
    client: &reqwest::Client,
    endpoint: &reqwest::Url,
    (args, request): (&CallArgs, &Value),
    credential: &Credential,
) -> Result<reqwest::Response, CliError> {
    let mut call = client
        .post(endpoint.clone())
        .header("A2A-Version", "1.0")
        .header("Content-Type", "application/json")
        .timeout(Duration::from_secs(args.timeout))
        .body(request.to_string());
    if args.stream {
        call = call.header("Accept", "text/event-stream");
    }
    if args.keep_receipt.is_some() {
        call = call.header("A2A-Extensions", crate::jose::receipt::EXTENSION);
    }
    call = match credential {
        Credential::Bearer(token) => call.bearer_auth(token),
        Credential::Basic(user, password) => call.basic_auth(user, Some(password)),
        Credential::ApiKey(header, key) => call.header(header, key),
        Credential::None | Credential::Discover => call,
    };
    call.send().await.map_err(|e| {
        exit(
            EXIT_OTHER,
            format!(
                "cannot reach {}: {}",
                crate::jose::fetch::shown_url(endpoint),
                reason(&e)
            ),
        )
    })
}

/// A token for the client credentials from where the 401 points (RFC 9728, RFC 8414), asked
/// for the resource called (RFC 8707).
async fn discovered_token(
    fetcher: &Fetcher,
    (args, card): (&CallArgs, &Value),
    response: &reqwest::Response,
    endpoint: &reqwest::Url,
) -> Result<String, CliError> {
    let challenges: Vec<String> = response
        .headers()
        .get_all("www-authenticate")
        .iter()
        .filter_map(|value| value.to_str().ok().map(str::to_owned))
        .collect();
    let discovered = super::discovery::from_challenge(fetcher, &challenges, endpoint, card).await?;
    super::client_credentials::access_token(
        fetcher,
        super::client_credentials::Request {
            client_id: args.client_id.as_deref().unwrap_or_default(),
            secret_env: args.client_secret_env.as_deref(),
            scope: args.scope.as_deref().unwrap_or(DEFAULT_SCOPE),
            token_url: Some(&discovered.token_url),
            card: None,
            resource: Some(&discovered.resource),
        },
    )
    .await
}

/// The answer printed: the text (or the JSON result), streamed or whole; its receipt kept
/// with what it was for, when asked.
async fn answer(
    response: reqwest::Response,
    (args, request): (&CallArgs, &Value),
) -> Result<(), CliError> {
    let result = if args.stream {
        streamed(response, args.json).await?
    } else {
        let body = read_bounded(response, MAX_ANSWER_BYTES).await?;
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|_| exit(EXIT_OTHER, "the agent's answer is not JSON"))?;
        let result = rpc_result(&answer)?;
        if args.json {
            println!(
                "{}",
                printable_json(&serde_json::to_string_pretty(&result).unwrap_or_default())
            );
        } else {
            println!("{}", printable(&answer_text(&result)));
        }
        result
    };
    if let Some(dir) = &args.keep_receipt {
        keep_receipt(dir, request, &result)?;
    }
    report(&result)
}

/// Keeps the receipt of the task in `result`, with the request and the task, in `dir`.
fn keep_receipt(dir: &std::path::Path, request: &Value, result: &Value) -> Result<(), CliError> {
    let (task, is_task) = unwrap_result(result);
    let receipt = (task["metadata"][crate::jose::receipt::EXTENSION].as_str()).filter(|_| is_task);
    let (Some(receipt), Some(id)) = (receipt, task["id"].as_str()) else {
        eprintln!("receipt: none came with the answer");
        return Ok(());
    };
    // The task id names the files: only what a file name may hold.
    let name: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let write = |suffix: &str, text: &str| {
        let path = dir.join(format!("{name}.{suffix}"));
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|e| {
                exit(
                    EXIT_OTHER,
                    format!("cannot keep the receipt in {}: {}", dir.display(), e.kind()),
                )
            })
            .map(|()| path)
    };
    write("request.json", &request.to_string())?;
    write("task.json", &task.to_string())?;
    let kept = write("receipt", receipt)?;
    eprintln!("receipt: kept in {}", kept.display());
    Ok(())
}

/// The JSON-RPC request: the text as a new message, in the context or task named, sent or
/// streamed.
fn request_body(args: &CallArgs) -> Value {
    let mut message = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "role": "ROLE_USER",
        "parts": [{"text": args.text}],
    });
    if let Some(context) = &args.context {
        message["contextId"] = json!(context);
    }
    if let Some(task) = &args.task {
        message["taskId"] = json!(task);
    }
    let method = if args.stream {
        "SendStreamingMessage"
    } else {
        "SendMessage"
    };
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": method,
        "params": {"message": message}});
    request
}

/// What the card said, and the JSON-RPC interface picked from it.
struct Interface {
    card: Value,
    url: String,
}

/// Parses and verifies the card; returns the JSON-RPC interface and whether a signature
/// verified.
async fn check_card(
    keys: &CardKeys,
    args: &CallArgs,
    card_text: &str,
) -> Result<(Interface, bool), CliError> {
    let verified = if keys.none_named() {
        if !args.insecure_unsigned {
            return Err(exit(
                EXIT_CARD_NOT_VERIFIED,
                "no keys to verify the card: give --jwks FILE|URL (an agent served by peergate publishes /.well-known/jwks.json) or --secret KID=BASE64URL, or --insecure-unsigned to use it unverified",
            ));
        }
        eprintln!("warning: the card was not verified (--insecure-unsigned)");
        false
    } else {
        match keys.verify(card_text).await? {
            Ok(verified) => {
                eprintln!(
                    "card verified: kid {} ({})",
                    printable(&verified.kid),
                    verified.alg
                );
                true
            }
            Err(VerifyError::NoSignature) if args.insecure_unsigned => {
                eprintln!("warning: the card carries no signature (--insecure-unsigned)");
                false
            }
            Err(e) => {
                return Err(exit(
                    EXIT_CARD_NOT_VERIFIED,
                    format!("the card is not verified: {e}"),
                ));
            }
        }
    };
    let card: Value = serde_json::from_str(card_text)
        .map_err(|_| exit(EXIT_CARD_NOT_VERIFIED, "the card is not JSON"))?;
    let url = jsonrpc_url(&card).ok_or_else(|| {
        exit(
            EXIT_OTHER,
            "the card advertises no JSON-RPC interface (supportedInterfaces with protocolBinding JSONRPC)",
        )
    })?;
    Ok((Interface { card, url }, verified))
}

/// The URL of the card's JSON-RPC interface (an A2A 1.0 `supportedInterfaces` entry, or a
/// 0.3 card's `url` when it prefers JSON-RPC).
fn jsonrpc_url(card: &Value) -> Option<String> {
    if let Some(interfaces) = card["supportedInterfaces"].as_array() {
        return interfaces
            .iter()
            .find(|i| i["protocolBinding"] == "JSONRPC")
            .and_then(|i| i["url"].as_str())
            .map(str::to_owned);
    }
    let preferred = card["preferredTransport"].as_str().unwrap_or("JSONRPC");
    (preferred == "JSONRPC")
        .then(|| card["url"].as_str().map(str::to_owned))
        .flatten()
}

/// The card's URL for what the caller gave.
fn card_url(given: &str) -> Result<String, CliError> {
    let url = reqwest::Url::parse(given)
        .map_err(|_| exit(EXIT_OTHER, format!("{given:?} is not a URL")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(exit(
            EXIT_OTHER,
            "credentials in a URL are refused: use --token, --basic or --api-key",
        ));
    }
    if url.path().ends_with(".json") {
        Ok(url.to_string())
    } else {
        Ok(format!(
            "{}/.well-known/agent-card.json",
            url.as_str().trim_end_matches('/')
        ))
    }
}

/// The interface's URL, checked: the credential goes to the origin whose card was read (and
/// verified) only, unless the caller allows another one; an unverified card may never point
/// elsewhere.
fn endpoint(
    interface: &Interface,
    card_url: &str,
    verified: bool,
    allow_other_origin: bool,
) -> Result<reqwest::Url, CliError> {
    let url = reqwest::Url::parse(&interface.url)
        .map_err(|_| exit(EXIT_OTHER, "the card's JSON-RPC interface URL is not a URL"))?;
    let card = reqwest::Url::parse(card_url).map_err(|_| exit(EXIT_OTHER, "not a URL"))?;
    if !verified && url.origin() != card.origin() {
        return Err(exit(
            EXIT_CARD_NOT_VERIFIED,
            format!(
                "the unverified card points to another origin ({}); verify it with --jwks or --secret",
                url.origin().ascii_serialization()
            ),
        ));
    }
    if !allow_other_origin && url.origin() != card.origin() {
        return Err(exit(
            EXIT_OTHER,
            format!(
                "the card's interface is on another origin ({}) than the card; the credential goes there only with --allow-other-origin",
                url.origin().ascii_serialization()
            ),
        ));
    }
    Ok(url)
}

enum Credential {
    Bearer(String),
    Basic(String, String),
    ApiKey(String, String),
    None,
    /// Client credentials with no token URL known: the agent's 401 will say where.
    Discover,
}

/// The scopes asked for when `--scope` names none.
const DEFAULT_SCOPE: &str = "a2a:message a2a:tasks:read";

async fn credential(
    args: &CallArgs,
    card: &Value,
    fetcher: &Fetcher,
    verified: bool,
) -> Result<Credential, CliError> {
    if let Some(client_id) = &args.client_id {
        if args.token_url.is_none() && !super::client_credentials::names_token_url(card, verified) {
            // The secret goes only where a signed card leads: an unsigned one could lead anywhere.
            if !verified {
                return Err(exit(
                    EXIT_OTHER,
                    "the card is not verified, so neither its token URL nor discovery is used: give --token-url",
                ));
            }
            return Ok(Credential::Discover);
        }
        let token = super::client_credentials::access_token(
            fetcher,
            super::client_credentials::Request {
                client_id,
                secret_env: args.client_secret_env.as_deref(),
                scope: args.scope.as_deref().unwrap_or(DEFAULT_SCOPE),
                token_url: args.token_url.as_deref(),
                card: verified.then_some(card),
                resource: None,
            },
        )
        .await?;
        return Ok(Credential::Bearer(token));
    }
    if let Some(token) = &args.token {
        return Ok(Credential::Bearer(token.clone()));
    }
    if let Some(user) = &args.basic {
        let password = super::read_password(user)?;
        return Ok(Credential::Basic(user.clone(), password));
    }
    if let Some(key) = &args.api_key {
        // The header the card's apiKey scheme names.
        let header = card["securitySchemes"]
            .as_object()
            .into_iter()
            .flat_map(|schemes| schemes.values())
            .find_map(|scheme| {
                let api_key = &scheme["apiKeySecurityScheme"];
                (api_key["location"] == "header")
                    .then(|| api_key["name"].as_str())
                    .flatten()
            })
            .ok_or_else(|| {
                exit(
                    EXIT_OTHER,
                    "the card names no API-key scheme in a header; use --token or --basic",
                )
            })?;
        return Ok(Credential::ApiKey(header.to_owned(), key.clone()));
    }
    Ok(Credential::None)
}

/// The command's one guarded client: the caller's roots and client certificate, the reach the
/// flags allow.
fn fetcher(args: &CallArgs) -> Result<Fetcher, CliError> {
    let identity = args.cert.as_deref().zip(args.key.as_deref());
    let tls = crate::net::tls::client_config_presenting(
        args.ca_file.as_deref(),
        "--ca-file",
        false,
        identity,
    )?;
    args.reach.fetcher(&tls)
}

async fn read_bounded(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, CliError> {
    crate::net::client::read_bounded(&mut response, limit)
        .await
        .map_err(|e| match e {
            crate::net::client::BodyError::TooLarge => exit(
                EXIT_OTHER,
                format!("the answer is larger than {limit} bytes"),
            ),
            crate::net::client::BodyError::Broken(e) => {
                exit(EXIT_OTHER, format!("the answer broke off: {}", reason(&e)))
            }
        })
}

/// The HTTP refusals that have their own exit status.
fn refused(response: &reqwest::Response) -> Result<(), CliError> {
    let status = response.status();
    match status.as_u16() {
        401 | 403 => Err(exit(
            EXIT_AUTH_REFUSED,
            format!(
                "the agent refused the credential (HTTP {})",
                status.as_u16()
            ),
        )),
        429 => {
            let wait = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map_or_else(|| "a while".to_owned(), |s| format!("{s} s"));
            Err(exit(
                EXIT_RATE_LIMITED,
                format!("rate limited: retry after {wait}"),
            ))
        }
        200 => Ok(()),
        other => Err(exit(
            EXIT_OTHER,
            format!("the agent answered HTTP status {other}"),
        )),
    }
}

/// A JSON-RPC error's code as printed: the number, or what stands in its place shown safely
/// (an agent's code is not always a number, and could carry a terminal's escapes).
fn error_code(code: &Value) -> String {
    match code.as_i64() {
        Some(number) => number.to_string(),
        None => printable(&shortened(&printable_json(&code.to_string()))),
    }
}

/// The `result` of a JSON-RPC response, or its error as a failure.
fn rpc_result(answer: &Value) -> Result<Value, CliError> {
    if let Some(error) = answer.get("error") {
        return Err(exit(
            EXIT_OTHER,
            format!(
                "the agent answered error {}: {}",
                error_code(&error["code"]),
                printable(&shortened(
                    error["message"].as_str().unwrap_or("(no message)")
                ))
            ),
        ));
    }
    answer.get("result").cloned().ok_or_else(|| {
        exit(
            EXIT_OTHER,
            "the agent's answer holds neither result nor error",
        )
    })
}

/// Reads a stream of JSON-RPC responses, printing text as it arrives; returns the final task
/// or message.
async fn streamed(mut response: reqwest::Response, json: bool) -> Result<Value, CliError> {
    let mut events = ServerSentEvents::default();
    let mut last = Value::Null;
    let mut printed = false;
    // The text printed from status updates since the last artifact: a gateway streams a
    // model's answer as status updates and then sends it whole as the artifact, which is not
    // printed again.
    let mut streamed = String::new();
    let mut read = 0usize;
    let mut take = |data: String, last: &mut Value| -> Result<(), CliError> {
        let answer: Value = serde_json::from_str(&data)
            .map_err(|_| exit(EXIT_OTHER, "a streamed event is not JSON"))?;
        let result = rpc_result(&answer)?;
        if json {
            println!("{}", printable_json(&result.to_string()));
        } else {
            let piece = if let Some(update) = result.get("statusUpdate") {
                let piece = (update["status"]["state"] == "TASK_STATE_WORKING")
                    .then(|| parts_text(&update["status"]["message"]["parts"]));
                if let Some(piece) = &piece {
                    streamed.push_str(piece);
                }
                piece
            } else {
                result.get("artifactUpdate").and_then(|update| {
                    let whole = parts_text(&update["artifact"]["parts"]);
                    let again = !streamed.is_empty() && whole == streamed;
                    streamed.clear();
                    (!again).then_some(whole)
                })
            };
            if let Some(piece) = piece.filter(|p| !p.is_empty()) {
                print!("{}", printable(&piece));
                let _ = std::io::stdout().flush();
                printed = true;
            }
        }
        merge(last, result);
        Ok(())
    };
    // Read until the answer is settled (an agent may keep its stream open after it), or the
    // stream ends.
    'reading: loop {
        let chunk = response
            .chunk()
            .await
            .map_err(|e| exit(EXIT_OTHER, format!("the stream broke off: {}", reason(&e))))?;
        let Some(chunk) = chunk else {
            for data in events.finish() {
                take(data, &mut last)?;
            }
            break;
        };
        read += chunk.len();
        if read > MAX_ANSWER_BYTES {
            return Err(exit(EXIT_OTHER, "the stream is larger than allowed"));
        }
        for data in events.push(&chunk) {
            take(data, &mut last)?;
            if settled(&last) {
                break 'reading;
            }
        }
    }
    if !json {
        if printed {
            println!();
        } else {
            println!("{}", printable(&answer_text(&last)));
        }
    }
    Ok(last)
}

/// Folds a stream event into what is known of the answer: a task or a message replaces it, a
/// status update changes its status.
fn merge(last: &mut Value, event: Value) {
    if let Some(task) = event.get("task") {
        *last = json!({"task": task});
    } else if let Some(message) = event.get("message") {
        *last = json!({"message": message});
    } else if let Some(update) = event.get("statusUpdate") {
        if last.get("task").is_none() {
            *last = json!({"task": {"id": update["taskId"], "contextId": update["contextId"]}});
        }
        last["task"]["status"] = update["status"].clone();
    } else if let Some(update) = event.get("artifactUpdate")
        && last.get("task").is_some()
    {
        let artifacts = &mut last["task"]["artifacts"];
        if !artifacts.is_array() {
            *artifacts = json!([]);
        }
        if let Some(list) = artifacts.as_array_mut() {
            list.push(update["artifact"].clone());
        }
    }
}

/// Whether what a stream said so far is the answer: a message, or a task in a final state or
/// waiting for the caller (a stream's last word on a task; a gateway sends its artifacts
/// before it).
fn settled(last: &Value) -> bool {
    if last.get("message").is_some() {
        return true;
    }
    last["task"]["status"]["state"]
        .as_str()
        .and_then(crate::protocol::types::TaskState::from_name)
        .is_some_and(|state| state.is_final() || state.is_interrupted())
}

/// The task or message a result holds (`{"task": …}`, `{"message": …}`, or a bare one).
fn unwrap_result(result: &Value) -> (&Value, bool) {
    if let Some(task) = result.get("task") {
        (task, true)
    } else if let Some(message) = result.get("message") {
        (message, false)
    } else {
        (result, result.get("status").is_some())
    }
}

/// The answer's text: a message's text parts, or a task's artifacts (its status message when
/// it has none).
fn answer_text(result: &Value) -> String {
    let (inner, is_task) = unwrap_result(result);
    if !is_task {
        return parts_text(&inner["parts"]);
    }
    let from_artifacts: Vec<String> = inner["artifacts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|artifact| parts_text(&artifact["parts"]))
        .filter(|text| !text.is_empty())
        .collect();
    if from_artifacts.is_empty() {
        parts_text(&inner["status"]["message"]["parts"])
    } else {
        from_artifacts.join("\n")
    }
}

/// The text of `parts`: text parts as they are, data parts as JSON, files by name or URL.
fn parts_text(parts: &Value) -> String {
    parts
        .as_array()
        .into_iter()
        .flatten()
        .map(|part| {
            if let Some(text) = part["text"].as_str() {
                text.to_owned()
            } else if let Some(data) = part.get("data") {
                data.to_string()
            } else if let Some(url) = part["url"].as_str() {
                format!("[file {url}]")
            } else if part.get("raw").is_some() {
                format!(
                    "[file {}]",
                    part["filename"].as_str().unwrap_or("(inline bytes)")
                )
            } else {
                String::new()
            }
        })
        .collect::<Vec<_>>()
        .concat()
}

/// Prints the ids a follow-up needs and turns the final state into the exit status.
fn report(result: &Value) -> Result<(), CliError> {
    let (inner, is_task) = unwrap_result(result);
    if let Some(context) = inner["contextId"].as_str() {
        eprintln!("context: {}", printable(context));
    }
    if !is_task {
        return Ok(());
    }
    let state = inner["status"]["state"]
        .as_str()
        .unwrap_or("TASK_STATE_UNSPECIFIED");
    // Beside the context: what GetTask, CancelTask or a subscription would name it by (a task
    // waiting for input says so in its own line below).
    if !matches!(
        state,
        "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED"
    ) && let Some(id) = inner["id"].as_str()
    {
        eprintln!("task: {}", printable(id));
    }
    match state {
        "TASK_STATE_COMPLETED" => Ok(()),
        "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED" => {
            let (id, context) = (
                printable(inner["id"].as_str().unwrap_or_default()),
                printable(inner["contextId"].as_str().unwrap_or_default()),
            );
            eprintln!(
                "task: {id} is waiting ({state}); answer with --task {id} --context {context}"
            );
            Ok(())
        }
        "TASK_STATE_FAILED" | "TASK_STATE_REJECTED" | "TASK_STATE_CANCELED" => Err(exit(
            EXIT_TASK_FAILED,
            format!(
                "the task ended {state}: {}",
                printable(&parts_text(&inner["status"]["message"]["parts"]))
            ),
        )),
        other => Err(exit(
            EXIT_OTHER,
            format!(
                "the task is still {}; read it later with its id {}",
                printable(other),
                printable(&inner["id"].to_string())
            ),
        )),
    }
}

/// At most 200 characters of what an agent said in an error, marked when cut.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// The innermost reason of a client error (a refused certificate, a refused connection).
fn reason(error: &reqwest::Error) -> String {
    crate::net::client::innermost_reason(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::shown_text::is_bidi_control;

    #[test]
    fn a_card_may_point_elsewhere_only_verified_and_allowed() {
        let interface = Interface {
            card: json!({}),
            url: "https://elsewhere.example/a2a".to_owned(),
        };
        let card = "https://agent.example/.well-known/agent-card.json";
        let error = endpoint(&interface, card, false, true).unwrap_err();
        assert_eq!(error.exit_code, EXIT_CARD_NOT_VERIFIED);
        let error = endpoint(&interface, card, true, false).unwrap_err();
        assert!(error.message.contains("--allow-other-origin"));
        assert!(endpoint(&interface, card, true, true).is_ok());
    }

    #[test]
    fn the_card_url_is_the_well_known_path_unless_a_json_file_is_named() {
        assert!(card_url("https://user:pw@agent.example").is_err());
        assert_eq!(
            card_url("https://agent.example/").unwrap(),
            "https://agent.example/.well-known/agent-card.json"
        );
        assert_eq!(
            card_url("https://agent.example/cards/a.json").unwrap(),
            "https://agent.example/cards/a.json"
        );
    }

    #[test]
    fn an_agents_error_message_is_cut_to_200_characters() {
        assert_eq!(shortened("short"), "short");
        let long = shortened(&"é".repeat(500));
        assert_eq!(long.chars().count(), 201);
        assert!(long.ends_with('…'));
    }

    #[test]
    fn an_agents_error_code_is_printed_as_a_number_or_shown_safely() {
        assert_eq!(error_code(&json!(-32001)), "-32001");
        let shown = error_code(&json!("\u{9b}2J\u{202e}evil"));
        assert!(
            shown
                .chars()
                .all(|c| !c.is_control() && !is_bidi_control(c)),
            "{shown:?}"
        );
        assert!(shown.contains("2J") && shown.contains("evil"), "{shown}");
    }

    #[test]
    fn an_agents_terminal_escapes_are_not_printed() {
        assert_eq!(
            printable("ok\u{1b}[2J\nnext\tcol\u{7}"),
            "ok?[2J\nnext\tcol?"
        );
        // C1 (a CSI of its own) and the bidirectional overrides and isolates too.
        assert_eq!(
            printable("a\u{9b}2Jb\u{202e}txt.exe\u{2066}c\u{2069}"),
            "a?2Jb?txt.exe?c?"
        );
    }

    #[test]
    fn json_output_escapes_what_a_terminal_would_obey_and_means_the_same() {
        let answer = serde_json::json!({"text": "a\u{9b}2J\u{1b}[0m\u{202e}b\u{7f}"});
        let printed = printable_json(&answer.to_string());
        assert!(
            printed
                .chars()
                .all(|c| !c.is_control() && !is_bidi_control(c)),
            "{printed:?}"
        );
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&printed).unwrap(),
            answer
        );
    }

    #[test]
    fn the_answer_text_comes_from_artifacts_or_the_message() {
        let task = json!({"task": {"status": {"state": "TASK_STATE_COMPLETED",
            "message": {"parts": [{"text": "status"}]}},
            "artifacts": [{"parts": [{"text": "a"}, {"data": {"k": 1}}]}]}});
        assert_eq!(answer_text(&task), "a{\"k\":1}");
        let message = json!({"message": {"parts": [{"text": "hi"}, {"url": "https://x/f.pdf"}]}});
        assert_eq!(answer_text(&message), "hi[file https://x/f.pdf]");
    }
}
