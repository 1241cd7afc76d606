//! What every outgoing HTTP call shares: reading a body within a bound, and the reason a call
//! failed, in words.

/// Why a body was not read whole.
#[derive(Debug)]
pub enum BodyError {
    /// It is longer than the bound.
    TooLarge,
    /// The connection broke while it was read.
    Broken(reqwest::Error),
}

/// Reads `response`'s body, refusing one longer than `limit` bytes as soon as it passes it.
pub async fn read_bounded(
    response: &mut reqwest::Response,
    limit: usize,
) -> Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Broken)? {
        if body.len() + chunk.len() > limit {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Idle connections a client keeps to one host for the next requests: enough for the requests
/// a busy gateway has in flight to it at once, and no more, so a burst does not leave hundreds
/// of sockets open on either side.
const IDLE_CONNECTIONS_PER_HOST: usize = 32;

/// How long an idle connection is kept: long enough to carry the next message of a
/// conversation, short enough not to hold a socket the server will soon close itself. A
/// connection the server closed while idle is not used again; a request written to one it
/// closes at that moment is sent again on a new one only if nothing of it was sent.
const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `builder` keeping its connections for the next requests, a bounded number for a bounded
/// time.
pub fn keeping_connections(builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    builder
        .pool_max_idle_per_host(IDLE_CONNECTIONS_PER_HOST)
        .pool_idle_timeout(IDLE_TIMEOUT)
}

/// At most this much of a body is read past what was wanted from it, to keep its connection.
const REST_BYTES: usize = 64 * 1024;

/// And for at most this long.
const REST_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Reads what is left of `response`'s body and throws it away, so that its connection goes back
/// to the client's pool for the next request: hyper keeps a connection only once the body on it
/// was read to its end, and closes it otherwise. A stream's last event (a task's final state,
/// `[DONE]`) comes just before its end, and an error status's body is small, so this is
/// usually one read. It is waited for: an answer given before the end would race the next
/// request to the connection and lose it to a new one. A server that sends more than
/// [`REST_BYTES`], or does not end within [`REST_WITHIN`], loses its connection instead,
/// deliberately: nothing it sends is read further.
pub async fn read_rest(response: &mut reqwest::Response) {
    let _ = tokio::time::timeout(REST_WITHIN, async {
        let mut left = REST_BYTES;
        while let Ok(Some(chunk)) = response.chunk().await {
            let Some(rest) = left.checked_sub(chunk.len()) else {
                return;
            };
            left = rest;
        }
    })
    .await;
}

/// The innermost reason in an error's chain (a resolver's refusal, a refused connection):
/// the part an operator can act on.
pub fn innermost_reason(error: &(dyn std::error::Error + 'static)) -> String {
    if let Some(problem) = crate::net::tls::certificate_problem(error) {
        return format!("the TLS certificate was not accepted: {problem}");
    }
    let mut reason = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        reason = inner.to_string();
        source = inner.source();
    }
    reason
}
