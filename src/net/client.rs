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
