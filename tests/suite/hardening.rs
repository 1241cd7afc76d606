//! Hostile clients and failing parts: slow and excess connections, chunked and slow bodies, a
//! model server that truncates, resets or hangs, SIGKILL mid-request and SIGTERM.

use crate::common::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Reads until the server closes the connection (or `limit` passes); returns what it sent, and
/// whether it closed.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, bool) {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let deadline = Instant::now() + limit;
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    while Instant::now() < deadline {
        match stream.read(&mut buffer) {
            Ok(0) => return (String::from_utf8_lossy(&received).into_owned(), true),
            Ok(n) => received.extend_from_slice(&buffer[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (String::from_utf8_lossy(&received).into_owned(), true),
        }
    }
    (String::from_utf8_lossy(&received).into_owned(), false)
}

#[tokio::test]
async fn a_client_that_goes_silent_mid_request_line_is_dropped_while_others_are_served() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("server.header_read_timeout_seconds", 1)
            .policy(),
    )
    .await;
    let mut silent = TcpStream::connect(gw.addr).unwrap();
    silent.write_all(b"POST /a2a/v1 HT").unwrap();
    // Others are served meanwhile.
    for _ in 0..3 {
        let health = reqwest::get(gw.url("/health")).await.unwrap();
        assert_eq!(health.status(), 200);
    }
    let addr = gw.addr;
    let (_, closed) = tokio::task::spawn_blocking(move || {
        let _ = addr;
        read_until_closed(&mut silent, Duration::from_secs(15))
    })
    .await
    .unwrap();
    assert!(closed, "the silent client is still connected");
    // A client that completes its head in time is unaffected.
    let health = reqwest::get(gw.url("/health")).await.unwrap();
    assert_eq!(health.status(), 200);
    gw.stop().await;
}

#[tokio::test]
async fn connections_past_the_cap_are_closed_unread_until_one_frees() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("server.max_connections", 3)
            .policy(),
    )
    .await;
    let held: Vec<TcpStream> = (0..3)
        .map(|_| TcpStream::connect(gw.addr).unwrap())
        .collect();
    // Give the server a moment to accept them all, then the fourth is refused.
    let addr = gw.addr;
    let refused = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut extra = TcpStream::connect(addr).unwrap();
            let _ = extra.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
            let (answer, closed) = read_until_closed(&mut extra, Duration::from_secs(2));
            if closed && answer.is_empty() {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
        }
    })
    .await
    .unwrap();
    assert!(refused, "a fourth connection was served");
    drop(held);
    // Once the held connections close, requests are served again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(response) = reqwest::get(gw.url("/health")).await
            && response.status() == 200
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after the cap freed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.stop().await;
}

/// Sends `head` and then `body` in pieces on a raw connection; returns the whole answer, status
/// line first.
async fn raw_exchange(addr: std::net::SocketAddr, head: String, body: Vec<Vec<u8>>) -> String {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    for piece in body {
        // The server may answer and close before the body is through.
        if stream.write_all(&piece).await.is_err() {
            break;
        }
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_chunked_body_over_the_limit_is_refused_with_413() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let head = format!(
        "POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let chunk = |data: &[u8]| {
        let mut piece = format!("{:x}\r\n", data.len()).into_bytes();
        piece.extend_from_slice(data);
        piece.extend_from_slice(b"\r\n");
        piece
    };
    let mut pieces = vec![chunk(
        b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"GetTask\",\"params\":{\"id\":\"",
    )];
    for _ in 0..(1024 + 16) {
        pieces.push(chunk(&[b'a'; 1024]));
    }
    pieces.push(chunk(b"\"}}"));
    pieces.push(b"0\r\n\r\n".to_vec());
    let status = raw_exchange(gw.addr, head.clone(), pieces).await;
    assert!(status.starts_with("HTTP/1.1 413"), "{status}");
    // The same framing under the limit is served.
    let small = vec![
        chunk(br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#),
        b"0\r\n\r\n".to_vec(),
    ];
    let status = raw_exchange(gw.addr, head, small).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    gw.stop().await;
}

/// A request head past 32 KiB (one long header line) is answered 431 before anything reads
/// it; a head within it is served.
#[tokio::test]
async fn a_header_line_past_the_head_limit_is_refused_with_431() {
    let gw = TestGateway::start().await;
    let token = gw.add_peer("alice");
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#.to_vec();
    let head = |padding: usize| {
        format!(
            "POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nX-Pad: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            "p".repeat(padding),
            body.len()
        )
    };
    let status = raw_exchange(gw.addr, head(64 * 1024), vec![body.clone()]).await;
    assert!(status.starts_with("HTTP/1.1 431"), "{status}");
    let status = raw_exchange(gw.addr, head(8 * 1024), vec![body]).await;
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    gw.stop().await;
}

#[tokio::test]
async fn a_body_that_never_finishes_is_cut_by_the_request_timeout() {
    let gw = TestGateway::start_with(
        PolicyEdit::default()
            .set("model.timeout_seconds", 1)
            .set("server.request_timeout_seconds", 3)
            .policy(),
    )
    .await;
    let token = gw.add_peer("alice");
    let head = format!(
        "POST /a2a/v1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 200\r\nConnection: close\r\n\r\n"
    );
    // Ten bytes of the promised 200, then silence.
    let status = raw_exchange(gw.addr, head, vec![b"{\"jsonrpc\"".to_vec()]).await;
    assert!(status.starts_with("HTTP/1.1 408"), "{status}");
    assert!(status.contains("\"code\":\"request_timeout\""), "{status}");
    gw.stop().await;
}

/// A model server on loopback that misbehaves at the HTTP level: reads a request, then does
/// `behaviour` to the connection.
#[derive(Clone, Copy, Debug)]
enum RawModel {
    /// Promises 4,096 bytes, sends a JSON prefix, and closes.
    Truncated,
    /// Sends part of the body, then resets the connection (RST).
    ResetMidBody,
    /// Reads the request and never answers.
    Hang,
}

async fn start_raw_model(behaviour: RawModel) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 65536];
                let _ = stream.read(&mut buffer).await;
                match behaviour {
                    RawModel::Truncated => {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n{\"choices\":[{\"message\":{\"content\":\"half")
                            .await;
                    }
                    RawModel::ResetMidBody => {
                        let _ = stream
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"choices\":[{\"m\r\n")
                            .await;
                        let _ = stream.set_zero_linger();
                    }
                    RawModel::Hang => {
                        tokio::time::sleep(Duration::from_secs(600)).await;
                    }
                }
            });
        }
    });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn a_model_that_truncates_resets_or_hangs_ends_the_task_failed_within_its_timeout() {
    for behaviour in [RawModel::Truncated, RawModel::ResetMidBody, RawModel::Hang] {
        let base_url = start_raw_model(behaviour).await;
        let gw = TestGateway::start_with(
            PolicyEdit::default()
                .openai(&base_url, "m")
                .set("model.timeout_seconds", 2)
                .policy(),
        )
        .await;
        let token = gw.add_peer("alice");
        let started = Instant::now();
        let response = send_text(&gw.door, &token, "hello", None).await;
        let took = started.elapsed();
        let task = task_of(&response);
        assert_eq!(
            task["status"]["state"], "TASK_STATE_FAILED",
            "{behaviour:?}: {response}"
        );
        assert!(
            took < Duration::from_secs(3),
            "{behaviour:?} took {took:?}, past the 2 s timeout plus one second"
        );
        let text = response.to_string();
        assert!(
            !text.contains("half") && !text.contains("127.0.0.1"),
            "{text}"
        );
        // The gateway is still whole: it answers the next request.
        let health = reqwest::get(gw.url("/health")).await.unwrap();
        assert_eq!(health.status(), 200);
        gw.stop().await;
    }
}

/// A policy file for `peergate serve` using the model at `base_url`.
fn policy_file(dir: &Path, base_url: &str, timeout: u64) -> String {
    let path = dir.join("policy.toml");
    std::fs::write(
        &path,
        PolicyEdit::default()
            .openai(base_url, "m")
            .set("model.timeout_seconds", timeout)
            .text(),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// A connection to the SQLite file under `data`, for tests that read or break it from outside
/// (each checks `skip_unless_sqlite` first).
async fn sqlite(data: &Path) -> sqlx::SqliteConnection {
    let url = format!(
        "sqlite://{}",
        data.join(peergate::store::sqlite::DATABASE_FILE).display()
    );
    <sqlx::SqliteConnection as sqlx::Connection>::connect(&url)
        .await
        .unwrap()
}

/// `peergate serve` in a child process over a fresh data directory with one peer, using
/// `model`; returns what the test needs to restart it on the same store.
struct ServedStore {
    dir: tempfile::TempDir,
    data: std::path::PathBuf,
    data_arg: String,
    policy: String,
    token: String,
}

impl ServedStore {
    fn new(model: &FakeModel) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let data_arg = data.to_str().unwrap().to_owned();
        let policy = policy_file(dir.path(), &model.base_url, 30);
        let token = add_peer(&data, "alice");
        Self {
            dir,
            data,
            data_arg,
            policy,
            token,
        }
    }

    fn args(&self) -> [&str; 2] {
        ["--policy", &self.policy]
    }

    fn serve(&self) -> ServeProcess {
        ServeProcess::start_with(self.dir.path(), &self.data, &self.args(), &[])
    }
}

#[tokio::test]
async fn killed_mid_request_the_task_reads_failed_interrupted_after_the_restart() {
    if skip_unless_sqlite("the task is read from the SQLite file") {
        return;
    }
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let store = ServedStore::new(&model);
    let (data, token) = (store.data.clone(), store.token.clone());
    let server = store.serve();
    let door = server.door();
    let pending = {
        let token = token.clone();
        tokio::spawn(async move {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
                "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "never answered"}]}}});
            reqwest::Client::new()
                .post(&door)
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
        })
    };
    model.wait_for_arrival().await;
    // The task is in the store while the model is being asked.
    let mut db = sqlite(&data).await;
    let (task_id, state): (String, String) = sqlx::query_as("SELECT id, state FROM tasks")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(state, "TASK_STATE_WORKING");
    drop(db);
    server.kill();
    assert!(
        pending.await.unwrap().is_err(),
        "the killed server answered"
    );

    let server = store.serve();
    let task = get_task(&server.door(), &token, &task_id, None).await;
    assert_eq!(
        task["result"]["status"]["state"], "TASK_STATE_FAILED",
        "{task}"
    );
    let text = task["result"]["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("interrupted"), "{text}");
    assert_eq!(
        task["result"]["history"][0]["parts"][0]["text"],
        "never answered"
    );
    assert!(
        server.log_text().contains("interrupted"),
        "the start-up says so"
    );
    drop(server);
    let mut db = sqlite(&data).await;
    let check: String = sqlx::query_scalar("PRAGMA integrity_check")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(check, "ok");
}

#[tokio::test]
async fn sigterm_finishes_requests_in_flight_refuses_new_connections_and_exits_zero() {
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let store = ServedStore::new(&model);
    let token = store.token.clone();
    let mut server = store.serve();
    let door = server.door();
    let in_flight = {
        let token = token.clone();
        tokio::spawn(async move { send_text(&door, &token, "finish me", None).await })
    };
    model.wait_for_arrival().await;
    let pid = server.child.id().to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    // New connections are refused once the listener is closed.
    let addr = server.addr;
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The request in flight is answered.
    model.release_one();
    let answered: Value = in_flight.await.unwrap();
    assert_eq!(
        task_of(&answered)["status"]["state"],
        "TASK_STATE_COMPLETED",
        "{answered}"
    );
    let exit = tokio::task::spawn_blocking(move || {
        let status = server.child.wait().unwrap();
        (status, server)
    })
    .await
    .unwrap();
    assert_eq!(exit.0.code(), Some(0), "{}", exit.1.log_text());
}

#[tokio::test]
async fn a_client_that_hangs_up_still_gets_its_task_finished() {
    if skip_unless_sqlite("the task is read from the SQLite file") {
        return;
    }
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let gw = TestGateway::start_with(model.policy(30)).await;
    let token = gw.add_peer("alice");
    let door = gw.door.clone();
    let hung_up = tokio::spawn(async move {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "answer after I leave"}]}}});
        reqwest::Client::new()
            .post(&door)
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .timeout(Duration::from_millis(500))
            .body(body.to_string())
            .send()
            .await
    });
    model.wait_for_arrival().await;
    assert!(hung_up.await.unwrap().is_err(), "the client gave up");
    model.release_one();
    let mut db = sqlite(gw.data.path()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let state: String = sqlx::query_scalar("SELECT state FROM tasks")
            .fetch_one(&mut db)
            .await
            .unwrap();
        if state == "TASK_STATE_COMPLETED" {
            break;
        }
        assert!(Instant::now() < deadline, "the task stayed {state}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    gw.stop().await;
}

#[tokio::test]
async fn an_internal_error_carries_a_request_id_that_the_log_shows_and_nothing_else() {
    if skip_unless_sqlite("the store is broken through its SQLite file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap().to_owned();
    let token = add_peer(&data, "alice");
    let server = ServeProcess::start(dir.path(), &data);
    let mut db = sqlite(&data).await;
    sqlx::query("ALTER TABLE tasks RENAME TO tasks_gone")
        .execute(&mut db)
        .await
        .unwrap();
    let response = send_text(&server.door(), &token, "hello", None).await;
    assert_eq!(error_code(&response), -32603, "{response}");
    let request_id = response["error"]["data"][0]["metadata"]["requestId"]
        .as_str()
        .unwrap()
        .to_owned();
    let text = response.to_string();
    for leak in [
        data_arg.as_str(),
        "sqlite",
        "SQL",
        "tasks_gone",
        "peergate::",
        "sqlx",
        &token,
    ] {
        assert!(!text.contains(leak), "{leak} in {text}");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.log_text().contains(&request_id) {
        assert!(
            Instant::now() < deadline,
            "the log never named {request_id}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_full_disk_refuses_messages_before_the_model_and_keeps_what_was_stored() {
    if skip_unless_sqlite("the full disk is a size limit on SQLite's files") {
        return;
    }
    let model = FakeModel::start(ModelBehaviour::Answer).await;
    let store = ServedStore::new(&model);
    let token = store.token.clone();
    let server = store.serve();
    let first = send_text(
        &server.door(),
        &token,
        "stored before the disk filled",
        None,
    )
    .await;
    let first_id = task_of(&first)["id"].as_str().unwrap().to_owned();
    drop(server);

    // The same store on a "disk" that holds 2 MiB per file: writes past it fail with EFBIG
    // (SIGXFSZ ignored), which SQLite reports as a full disk.
    let server = ServeProcess::start_in_shell(
        store.dir.path(),
        "trap '' XFSZ; ulimit -f 2048;",
        &store.data,
        &store.args(),
        &[],
    );
    let big = "x".repeat(60_000);
    let mut refused = None;
    for _ in 0..200 {
        let asked_before = model.requests().len();
        let response = send_text(&server.door(), &token, &big, None).await;
        if response.get("error").is_some() {
            let message = response["error"]["message"].as_str().unwrap().to_owned();
            if message.contains("the model was not asked") {
                refused = Some((message, asked_before, model.requests().len()));
                break;
            }
        }
    }
    let (message, asked_before, asked_after) = refused.expect("the disk never filled");
    assert_eq!(asked_before, asked_after, "the model was asked: {message}");
    assert!(
        !message.contains("sqlite") && !message.contains(&store.data_arg),
        "{message}"
    );
    drop(server);

    // With room again, everything that was stored is readable, nothing is left working, and new
    // messages are answered.
    let server = store.serve();
    let mut db = sqlite(&store.data).await;
    let working: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM tasks WHERE state = 'TASK_STATE_WORKING'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(working, 0);
    let stored = get_task(&server.door(), &token, &first_id, None).await;
    assert_eq!(
        stored["result"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{stored}"
    );
    let again = send_text(&server.door(), &token, "after", None).await;
    assert_eq!(task_of(&again)["status"]["state"], "TASK_STATE_COMPLETED");
}

#[tokio::test]
async fn a_turn_whose_answer_cannot_be_stored_leaves_its_task_failed_sealed_not_working() {
    if skip_unless_sqlite("the store is broken through its SQLite file") {
        return;
    }
    let model = FakeModel::start(ModelBehaviour::Gated).await;
    let policy = PolicyEdit::default()
        .openai(&model.base_url, "test-model")
        .set("model.timeout_seconds", 30)
        .set("receipts.mode", "always");
    let gw = TestGateway::start_with(policy.policy()).await;
    let token = gw.add_peer("alice");
    let door = gw.door.clone();
    let turn = {
        let token = token.clone();
        tokio::spawn(async move { send_text(&door, &token, "answered, never stored", None).await })
    };
    model.wait_for_arrival().await;
    // The conversation can no longer be written; the task row still can.
    let mut db = sqlite(gw.data.path()).await;
    sqlx::query("ALTER TABLE messages RENAME TO messages_gone")
        .execute(&mut db)
        .await
        .unwrap();
    model.release_one();
    let response = turn.await.unwrap();
    assert_eq!(error_code(&response), -32603, "{response}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (state, body): (String, String) = sqlx::query_as("SELECT state, body FROM tasks")
            .fetch_one(&mut db)
            .await
            .unwrap();
        if state == "TASK_STATE_FAILED" {
            assert!(body.contains("could not finish this task"), "{body}");
            // Sealed as it failed, from what the turn kept; the answer's own receipt, made
            // and never stored, is not in the log.
            let task: Value = serde_json::from_str(&body).unwrap();
            let receipt = task["metadata"][peergate::jose::receipt::EXTENSION]
                .as_str()
                .unwrap_or_else(|| panic!("no receipt in {body}"));
            let claims = jws_claims(receipt);
            assert_eq!(claims["a2a"]["state"], "TASK_STATE_FAILED", "{claims}");
            let logged: Vec<String> = sqlx::query_scalar("SELECT jws FROM receipts")
                .fetch_all(&mut db)
                .await
                .unwrap();
            assert_eq!(logged, [receipt], "one receipt, the failure's");
            break;
        }
        assert!(Instant::now() < deadline, "the task stayed {state}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gw.stop().await;
}

/// A file system of `mib` MiB mounted at `at` for as long as the value lives: a real disk that
/// fills (ENOSPC). Mounting needs root: `.ci/run` runs as root, and under `CI=true` a failed
/// mount fails the test; elsewhere it says so in one loud line and the test skips.
struct SmallDisk {
    at: std::path::PathBuf,
}

impl SmallDisk {
    fn mount(at: &Path, mib: u32) -> Option<Self> {
        std::fs::create_dir_all(at).unwrap();
        let options = format!("size={mib}m,mode=0700");
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(at)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if mounted {
            return Some(Self { at: at.to_owned() });
        }
        let why = format!("mounting a {mib} MiB tmpfs (a real disk to fill) needs root");
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "{why}; CI must allow it"
        );
        skipped(&why);
        None
    }

    /// Fills what is left with a ballast file; returns its path.
    fn fill(&self) -> std::path::PathBuf {
        self.fill_as("ballast")
    }

    /// Fills what is left with a ballast file named `name`; returns its path.
    fn fill_as(&self, name: &str) -> std::path::PathBuf {
        let ballast = self.at.join(name);
        let mut file = std::fs::File::create(&ballast).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while file.write_all(&chunk).is_ok() {}
        let _ = file.sync_all();
        ballast
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.at)
            .status();
    }
}

/// `peergate serve` on a store held by a [`SmallDisk`], with the administrator ada; fields drop
/// in order, the server before the disk it writes to.
struct OnSmallDisk {
    server: ServeProcess,
    disk: SmallDisk,
    _dir: tempfile::TempDir,
    _model: FakeModel,
    admin: String,
}

impl OnSmallDisk {
    /// `None` (after one loud line) where a disk cannot be mounted outside CI.
    async fn start() -> Option<Self> {
        let model = FakeModel::start(ModelBehaviour::Answer).await;
        let dir = tempfile::tempdir().unwrap();
        let disk = SmallDisk::mount(&dir.path().join("disk"), 16)?;
        let data = disk.at.join("data");
        let policy = policy_file(dir.path(), &model.base_url, 30);
        let (code, _, err) =
            cli_with_stdin_on(&data, &["admin", "add", "ada"], "ada's admin password 1\n");
        assert_eq!(code, 0, "{err}");
        let server = ServeProcess::start_with(dir.path(), &data, &["--policy", &policy], &[]);
        let admin = format!("http://{}", server.admin_addr);
        Some(Self {
            server,
            disk,
            _dir: dir,
            _model: model,
            admin,
        })
    }

    /// An admin API request as ada.
    fn as_ada(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        reqwest::Client::new()
            .request(method, format!("{}{path}", self.admin))
            .basic_auth("ada", Some("ada's admin password 1"))
    }

    /// Adds a peer through the admin API; its token.
    async fn add_peer(&self, name: &str) -> String {
        let created: Value = self
            .as_ada(reqwest::Method::POST, "/v1/peers")
            .json(&json!({ "name": name }))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        created["token"].as_str().unwrap().to_owned()
    }

    /// Revokes a peer through the admin API.
    async fn revoke(&self, name: &str) -> reqwest::Response {
        self.as_ada(reqwest::Method::POST, &format!("/v1/peers/{name}/revoke"))
            .json(&json!({}))
            .send()
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn after_a_full_disk_the_store_recovers_by_itself_and_a_revocation_always_lands() {
    if skip_unless_sqlite("the disk that fills holds the SQLite file") {
        return;
    }
    let Some(gateway) = OnSmallDisk::start().await else {
        return;
    };
    let (disk, door) = (&gateway.disk, gateway.server.door());
    let alice = gateway.add_peer("alice").await;
    let mallory = gateway.add_peer("mallory").await;
    let answered = send_text(&door, &alice, "before the disk filled", None).await;
    assert_eq!(
        task_of(&answered)["status"]["state"],
        "TASK_STATE_COMPLETED"
    );

    // Asked on the admin listener, whose answer names the part that cannot serve.
    let ready = |_door: &str| {
        let url = format!("{}/ready", gateway.admin);
        async move {
            let response = reqwest::get(url).await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    assert_eq!(ready(&door).await.0, 200);
    let ballast = disk.fill();
    let big = "x".repeat(60_000);
    let mut refused = false;
    for _ in 0..50 {
        let response = send_text(&door, &alice, &big, None).await;
        if response.get("error").is_some() {
            refused = true;
            break;
        }
    }
    assert!(refused, "the disk never filled");
    // The disk is still full: a revocation is the one write that must still be made.
    let response = gateway.revoke("mallory").await;
    let status = response.status();
    assert_eq!(status, 200, "{}", response.text().await.unwrap());
    let (status, _) = post_raw(
        &door,
        Some(&mallory),
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}).to_string(),
    )
    .await;
    assert_eq!(status, 401, "the revoked token still works");

    // A load balancer asking /ready takes this instance out of rotation meanwhile.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, body) = ready(&door).await;
    assert_eq!(
        (status, body["store"].as_str()),
        (503, Some("disk_full")),
        "{body}"
    );
    // Space comes back: the same process serves again, without a restart, and /ready (which
    // alone would see it, with no SendMessage coming) says so.
    std::fs::remove_file(&ballast).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ready(&door).await.0 != 200 {
        assert!(
            Instant::now() < deadline,
            "/ready stayed 503 after space came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response = send_text(&door, &alice, "after the disk had room again", None).await;
        if response.get("result").is_some() {
            assert_eq!(
                task_of(&response)["status"]["state"],
                "TASK_STATE_COMPLETED"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still refused after space came back: {response}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn an_account_change_that_finds_no_room_is_refused_and_succeeds_once_there_is_room() {
    if skip_unless_sqlite("the disk that fills holds the SQLite file") {
        return;
    }
    let Some(gateway) = OnSmallDisk::start().await else {
        return;
    };
    let (disk, door) = (&gateway.disk, gateway.server.door());
    let bob = gateway.add_peer("bob").await;
    // The disk fills; a SendMessage finds it full and the reserve is released; then something
    // else takes that room too, so even an account change cannot be written.
    let ballast = disk.fill();
    let refused = send_text(&door, &bob, "no room", None).await;
    assert!(refused.get("error").is_some(), "{refused}");
    let second_ballast = disk.fill_as("second-ballast");
    let response = gateway.revoke("bob").await;
    assert_eq!(response.status(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let answer: Value = response.json().await.unwrap();
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("disk"),
        "{answer}"
    );
    assert!(!answer.to_string().contains(disk.at.to_str().unwrap()));
    // Space comes back: the same process makes the change (the connection whose commit
    // failed is not reused) and serves SendMessage again.
    std::fs::remove_file(&ballast).unwrap();
    std::fs::remove_file(&second_ballast).unwrap();
    let response = gateway.revoke("bob").await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let (status, _) = post_raw(
        &door,
        Some(&bob),
        json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}).to_string(),
    )
    .await;
    assert_eq!(status, 401, "the revoked token still works");
}

/// Whether a fresh connection from this host to `addr` is closed unread.
fn closed_unread(addr: std::net::SocketAddr) -> bool {
    let mut extra = TcpStream::connect(addr).unwrap();
    let _ = extra.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    let (answer, closed) = read_until_closed(&mut extra, Duration::from_secs(2));
    closed && answer.is_empty()
}

#[tokio::test]
async fn one_address_holds_only_its_share_of_connections_unless_it_is_a_trusted_proxy() {
    for (trusted, refused_past_the_share) in [(false, true), (true, false)] {
        let mut policy = PolicyEdit::default().set("server.max_connections_per_address", 2);
        if trusted {
            policy = policy.set("server.trusted_proxies", ["127.0.0.1/32"]);
        }
        let gw = TestGateway::start_with(policy.policy()).await;
        let held: Vec<TcpStream> = (0..2)
            .map(|_| TcpStream::connect(gw.addr).unwrap())
            .collect();
        let addr = gw.addr;
        let refused = tokio::task::spawn_blocking(move || {
            // Give the server a moment to accept the two held ones.
            std::thread::sleep(Duration::from_millis(200));
            closed_unread(addr)
        })
        .await
        .unwrap();
        assert_eq!(refused, refused_past_the_share, "trusted proxy: {trusted}");
        drop(held);
        gw.stop().await;
    }
}

#[test]
fn the_open_files_limit_is_raised_for_the_connections_the_policy_allows() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The defaults allow 1,024 connections on the door: a soft limit of 512 is raised to what
    // they need (1,024 and 256 besides), below the hard limit.
    let server = ServeProcess::start_in_shell(dir.path(), "ulimit -Sn 512;", &data, &[], &[]);
    let log = server.log_with("raised the open-files limit");
    let line = log
        .lines()
        .find(|line| line.contains("raised the open-files limit"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        line.contains("from=512") && line.contains("to=1280"),
        "{line}"
    );
    drop(server);
    // A hard limit below it: the log says what to raise, and the door still serves.
    let server = ServeProcess::start_in_shell(dir.path(), "ulimit -n 512;", &data, &[], &[]);
    let log = server.log_with("open-files limit is below");
    assert!(log.contains("LimitNOFILE"), "{log}");
    let health = std::net::TcpStream::connect(server.addr);
    assert!(health.is_ok(), "the door serves");
}
