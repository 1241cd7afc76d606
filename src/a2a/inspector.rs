//! The content guard's outside inspector (`[content_guard.inspector]`, docs/content-guard.md):
//! a webhook the operator runs (a classifier, a DLP service). It is sent the texts the local
//! rules read, as they left them, and answers pass, mask (with replacements by index) or deny.
//! Every call is bounded: a slot among `max_concurrent` and the answer within `timeout_ms`
//! together, a body of at most 1 MiB, and a breaker that stops asking after
//! `breaker_failures` failures in a row for `breaker_seconds`. Whatever goes wrong is an
//! [`InspectorError`], and the guard's failure mode decides the call.

use crate::content::Direction;
use crate::content::settings::InspectorSettings;
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// The largest answer read.
const MAX_ANSWER_BYTES: usize = 1 << 20;

/// What the inspector decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do.
    Pass,
    /// Texts replaced, by the index they were sent at.
    Mask {
        /// `inspector/<its rule>`.
        rule: Arc<str>,
        /// (index, replacement)
        replacements: Vec<(usize, String)>,
    },
    /// Refused.
    Deny {
        /// `inspector/<its rule>`.
        rule: Arc<str>,
    },
}

/// Why no decision came; never the inspector's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InspectorError {
    /// Every slot stayed taken until the timeout.
    #[error("every slot was taken until the timeout")]
    Busy,
    /// The breaker is open after failures in a row.
    #[error("the breaker is open")]
    Open,
    /// No answer within the timeout.
    #[error("no answer within the timeout")]
    Timeout,
    /// It could not be reached.
    #[error("unreachable: {0}")]
    Unreachable(String),
    /// It answered an error status.
    #[error("answered HTTP {0}")]
    Status(u16),
    /// Its answer is not one (not JSON, an unknown verdict, an index out of range, too long).
    #[error("its answer is not one: {0}")]
    Garbage(&'static str),
}

/// The outside inspector, with its slots and breaker.
pub struct Inspector {
    client: reqwest::Client,
    url: String,
    token: Option<String>,
    timeout: Duration,
    directions: Vec<Direction>,
    slots: tokio::sync::Semaphore,
    breaker: Breaker,
}

impl Inspector {
    /// The inspector `settings` describe, its token read from the environment; or why not.
    pub fn new(settings: &InspectorSettings) -> Result<Self, String> {
        let token = match &settings.token_env {
            Some(name) => Some(std::env::var(name).map_err(|_| {
                format!(
                    "content_guard.inspector.token_env: the environment variable {name} is not set"
                )
            })?),
            None => None,
        };
        let ca_file = settings.ca_file.as_deref().map(std::path::Path::new);
        let tls = crate::net::tls::client_config(ca_file, "content_guard.inspector.ca_file", false)
            .map_err(|e| e.to_string())?;
        // A redirect is an error status: the texts go only where the policy says (an https://
        // URL, or loopback), never where an answer points.
        let client = crate::net::client::keeping_connections(crate::net::tls::client_builder(&tls))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("content_guard.inspector: cannot build the HTTP client: {e}"))?;
        Ok(Self {
            client,
            url: settings.url.clone(),
            token,
            timeout: Duration::from_millis(settings.timeout_ms),
            directions: settings.directions.clone(),
            slots: tokio::sync::Semaphore::new(settings.max_concurrent as usize),
            breaker: Breaker::new(
                settings.breaker_failures,
                Duration::from_secs(settings.breaker_seconds),
            ),
        })
    }

    /// Whether it inspects `direction`.
    pub fn inspects(&self, direction: Direction) -> bool {
        self.directions.is_empty() || self.directions.contains(&direction)
    }

    /// Its decision on `texts` that `peer` (by id) sends or is answered, in `direction`.
    pub async fn ask(
        &self,
        direction: Direction,
        peer: &str,
        texts: &[String],
    ) -> Result<Decision, InspectorError> {
        self.breaker.check()?;
        let deadline = Instant::now() + self.timeout;
        let Ok(Ok(_slot)) = tokio::time::timeout_at(deadline, self.slots.acquire()).await else {
            return Err(InspectorError::Busy);
        };
        let asked = tokio::time::timeout_at(deadline, self.call(direction, peer, texts)).await;
        let outcome = asked.unwrap_or(Err(InspectorError::Timeout));
        self.breaker.record(outcome.is_ok());
        outcome
    }

    async fn call(
        &self,
        direction: Direction,
        peer: &str,
        texts: &[String],
    ) -> Result<Decision, InspectorError> {
        let body = serde_json::json!({
            "version": 1,
            "direction": direction.as_str(),
            "peer": peer,
            "texts": texts,
        });
        let mut request = self.client.post(&self.url).json(&body);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let mut response = request
            .send()
            .await
            .map_err(|e| InspectorError::Unreachable(crate::net::client::innermost_reason(&e)))?;
        if !response.status().is_success() {
            return Err(InspectorError::Status(response.status().as_u16()));
        }
        let body = crate::net::client::read_bounded(&mut response, MAX_ANSWER_BYTES)
            .await
            .map_err(|_| InspectorError::Garbage("longer than 1 MiB, or cut short"))?;
        decision(&body, texts.len())
    }
}

/// An answer as the inspector writes it.
#[derive(Deserialize)]
struct Answer {
    verdict: String,
    #[serde(default)]
    rule: Option<String>,
    #[serde(default)]
    replacements: Vec<Replacement>,
}

#[derive(Deserialize)]
struct Replacement {
    index: usize,
    text: String,
}

/// `body` read as a decision about `sent` texts.
fn decision(body: &[u8], sent: usize) -> Result<Decision, InspectorError> {
    let answer: Answer =
        serde_json::from_slice(body).map_err(|_| InspectorError::Garbage("not a verdict"))?;
    // Its rule names the verdict in metrics and logs: only a plain name is taken.
    let name = answer.rule.filter(|rule| {
        (1..=64).contains(&rule.len())
            && rule
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    });
    let rule: Arc<str> = Arc::from(format!(
        "inspector/{}",
        name.as_deref().unwrap_or("verdict")
    ));
    match answer.verdict.as_str() {
        "pass" => Ok(Decision::Pass),
        "deny" => Ok(Decision::Deny { rule }),
        "mask" => {
            if answer.replacements.iter().any(|r| r.index >= sent) {
                return Err(InspectorError::Garbage(
                    "a replacement's index is past the texts sent",
                ));
            }
            let replacements = (answer.replacements.into_iter())
                .map(|r| (r.index, r.text))
                .collect();
            Ok(Decision::Mask { rule, replacements })
        }
        _ => Err(InspectorError::Garbage("an unknown verdict")),
    }
}

/// Stops asking after failures in a row, for a while; then lets calls try again (one more
/// failure opens it again at once).
struct Breaker {
    failures: AtomicU32,
    threshold: u32,
    open_for: Duration,
    open_until: std::sync::Mutex<Option<Instant>>,
}

impl Breaker {
    fn new(threshold: u32, open_for: Duration) -> Self {
        Self {
            failures: AtomicU32::new(0),
            threshold,
            open_for,
            open_until: std::sync::Mutex::new(None),
        }
    }

    fn check(&self) -> Result<(), InspectorError> {
        let mut open_until = crate::locks::Locked::locked(&self.open_until);
        match *open_until {
            Some(until) if Instant::now() < until => Err(InspectorError::Open),
            Some(_) => {
                *open_until = None;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn record(&self, answered: bool) {
        if answered {
            self.failures.store(0, Ordering::Relaxed);
            return;
        }
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if failures >= self.threshold {
            // One more failure after the pause opens it again.
            self.failures.store(self.threshold - 1, Ordering::Relaxed);
            *crate::locks::Locked::locked(&self.open_until) = Some(Instant::now() + self.open_for);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_a_verdict_with_indices_in_range_or_garbage() {
        assert_eq!(decision(br#"{"verdict":"pass"}"#, 1), Ok(Decision::Pass));
        assert_eq!(
            decision(br#"{"verdict":"deny","rule":"ssn"}"#, 1),
            Ok(Decision::Deny {
                rule: Arc::from("inspector/ssn")
            })
        );
        assert_eq!(
            decision(br#"{"verdict":"deny","rule":"a b\n"}"#, 1),
            Ok(Decision::Deny {
                rule: Arc::from("inspector/verdict")
            })
        );
        let masked =
            br#"{"verdict":"mask","rule":"name","replacements":[{"index":1,"text":"[name]"}]}"#;
        assert!(matches!(decision(masked, 2), Ok(Decision::Mask { .. })));
        assert!(matches!(
            decision(masked, 1),
            Err(InspectorError::Garbage(_))
        ));
        for garbage in [
            &b"<html>"[..],
            br#"{"verdict":"maybe"}"#,
            br#"{"rule":"x"}"#,
        ] {
            assert!(matches!(
                decision(garbage, 1),
                Err(InspectorError::Garbage(_))
            ));
        }
    }

    #[tokio::test]
    async fn the_breaker_opens_after_failures_in_a_row_and_tries_again_after_its_pause() {
        tokio::time::pause();
        let breaker = Breaker::new(2, Duration::from_secs(30));
        breaker.record(false);
        assert_eq!(breaker.check(), Ok(()));
        breaker.record(false);
        assert_eq!(breaker.check(), Err(InspectorError::Open));
        tokio::time::advance(Duration::from_secs(31)).await;
        assert_eq!(breaker.check(), Ok(()));
        breaker.record(false);
        assert_eq!(
            breaker.check(),
            Err(InspectorError::Open),
            "one failure opens it again"
        );
        tokio::time::advance(Duration::from_secs(31)).await;
        breaker.record(true);
        breaker.record(false);
        assert_eq!(breaker.check(), Ok(()), "a success starts the count again");
    }
}
