//! A flood of made-up peer tokens: checksum-valid (anyone can compute the checksum), with ids
//! no credential has, sent as fast as the door answers from many loopback addresses.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Every made-up token id starts with this, so a store's log can be searched for them.
pub const MADE_UP_ID_PREFIX: &str = "FLOOD";

/// A made-up peer token whose id starts with [`MADE_UP_ID_PREFIX`].
pub fn made_up_token() -> String {
    // 32 hex digits: base62 too.
    let secret = uuid::Uuid::new_v4().simple().to_string();
    let id = format!("{MADE_UP_ID_PREFIX}{}", &secret[..7]);
    peergate::token::assemble(peergate::token::CredentialKind::PeerToken, &id, &secret)
}

/// A flood running in the background.
pub struct Flood {
    stop: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Flood {
    /// Floods `door` from `addresses` loopback addresses (127.0.0.10 on), `per_address`
    /// requests in flight from each.
    pub fn start(door: &str, addresses: u8, per_address: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for n in 0..addresses {
            let client = reqwest::Client::builder()
                .local_address(std::net::IpAddr::from([127, 0, 0, 10 + n]))
                .build()
                .unwrap();
            for _ in 0..per_address {
                let (client, door) = (client.clone(), door.to_owned());
                let (stop, refused) = (stop.clone(), refused.clone());
                tasks.push(tokio::spawn(async move {
                    let body = r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t"}}"#;
                    while !stop.load(Ordering::Relaxed) {
                        let sent = client
                            .post(&door)
                            .bearer_auth(made_up_token())
                            .header("content-type", "application/json")
                            .body(body)
                            .send()
                            .await;
                        if sent.is_ok_and(|r| r.status() == 401) {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
        }
        Self {
            stop,
            refused,
            tasks,
        }
    }

    /// Stops the flood; returns how many of its requests were refused with 401.
    pub async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
        self.refused.load(Ordering::Relaxed)
    }
}

/// How long `token` took to be admitted at `door` (asked every 20 ms), or `None` when it was
/// not within `within`.
pub async fn admitted_within(door: &str, token: &str, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let client = reqwest::Client::new();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"none"}}"#;
    while started.elapsed() < within {
        let answer = client
            .post(door)
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await;
        if answer.is_ok_and(|r| r.status() == 200) {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}
