//! Detectors: a pattern that finds candidates and, where a pattern alone is weak, a check
//! that confirms them (a payment card's Luhn digit, an IBAN's ISO 7064 mod 97-10, a peergate
//! credential's CRC). Every pattern uses ASCII word boundaries, so the lazy DFA runs it.

use serde::Deserialize;

/// A checksummed or well-known format, as a rule's `detector`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Detector {
    /// A payment card number (13 to 19 digits, spaces or dashes between) whose Luhn check
    /// digit holds.
    PaymentCard,
    /// An IBAN whose mod 97-10 check holds.
    Iban,
    /// An e-mail address.
    Email,
    /// An AWS access key id (`AKIA…`, `ASIA…`).
    AwsAccessKey,
    /// A GitHub token (`ghp_…`, `gho_…`, `ghu_…`, `ghs_…`, `ghr_…`, `github_pat_…`).
    GithubToken,
    /// A Slack token (`xoxb-…`, `xoxp-…`, …).
    SlackToken,
    /// An OpenAI API key (`sk-proj-…`, `sk-svcacct-…`, `sk-admin-…`, or the older form).
    OpenaiKey,
    /// A Stripe live secret or restricted key.
    StripeKey,
    /// A Google API key (`AIza…`).
    GoogleApiKey,
    /// A PEM private key block.
    PrivateKey,
    /// A JSON Web Token (three base64url segments, the first two JSON objects).
    Jwt,
    /// A peergate credential (`pgt_`, `pgk_`, `pga_`) whose CRC holds.
    PeergateToken,
}

impl Detector {
    /// Its name in the policy and in the starting pack's rule ids.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PaymentCard => "payment-card",
            Self::Iban => "iban",
            Self::Email => "email",
            Self::AwsAccessKey => "aws-access-key",
            Self::GithubToken => "github-token",
            Self::SlackToken => "slack-token",
            Self::OpenaiKey => "openai-key",
            Self::StripeKey => "stripe-key",
            Self::GoogleApiKey => "google-api-key",
            Self::PrivateKey => "private-key",
            Self::Jwt => "jwt",
            Self::PeergateToken => "peergate-token",
        }
    }

    /// The pattern that finds its candidates.
    pub(super) fn pattern(self) -> &'static str {
        match self {
            // Any run of digit groups: the cards within it are found by `card_runs`.
            Self::PaymentCard => r"(?-u:\b)[0-9](?:[ -]?[0-9]){12,}(?-u:\b)",
            Self::Iban => r"(?-u:\b)[A-Z]{2}[0-9]{2}(?: ?[A-Z0-9]){11,30}(?-u:\b)",
            Self::Email => {
                r"(?-u:\b)[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63})*\.[A-Za-z]{2,24}(?-u:\b)"
            }
            Self::AwsAccessKey => r"(?-u:\b)(?:AKIA|ASIA)[A-Z0-9]{16}(?-u:\b)",
            Self::GithubToken => {
                r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})(?-u:\b)"
            }
            Self::SlackToken => r"(?-u:\b)xox[abposr]-[A-Za-z0-9-]{10,}(?-u:\b)",
            Self::OpenaiKey => {
                r"(?-u:\b)sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,}|[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20})(?-u:\b)"
            }
            Self::StripeKey => r"(?-u:\b)[rs]k_live_[A-Za-z0-9]{20,}(?-u:\b)",
            // No closing boundary: a key may end in `-`.
            Self::GoogleApiKey => r"(?-u:\b)AIza[0-9A-Za-z_-]{35}",
            Self::PrivateKey => {
                // To its END line, or to the end of the text: a key cut short is masked whole.
                r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?s:.*?)(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\z)"
            }
            Self::Jwt => {
                r"(?-u:\b)eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}(?-u:\b)"
            }
            Self::PeergateToken => r"(?-u:\b)pg[tka]_[0-9A-Za-z]{12}_[0-9A-Za-z]{38}(?-u:\b)",
        }
    }

    /// Which parts of a candidate the pattern found are one (their byte ranges): a card
    /// number's candidate may hold other digits around it (and several cards), an IBAN's may
    /// run into the words after it, so the runs within it are tried.
    pub(super) fn confirms(self, candidate: &str) -> Vec<(usize, usize)> {
        let whole = vec![(0, candidate.len())];
        match self {
            Self::PaymentCard => card_runs(candidate),
            Self::Iban => iban_prefix(candidate)
                .map(|end| vec![(0, end)])
                .unwrap_or_default(),
            Self::PeergateToken if !peergate_credential(candidate) => Vec::new(),
            _ => whole,
        }
    }
}

/// Every run of whole digit groups in `candidate` holding 13 to 19 digits whose Luhn digit
/// holds, as byte ranges (overlapping ones are masked as one): a card is written in whole
/// groups, so one beside other numbers is found whatever comes before or after it.
fn card_runs(candidate: &str) -> Vec<(usize, usize)> {
    let bytes = candidate.as_bytes();
    let digits: Vec<usize> = (0..bytes.len())
        .filter(|&at| bytes[at].is_ascii_digit())
        .collect();
    let starts_group = |at: usize| at == 0 || !bytes[at - 1].is_ascii_digit();
    let ends_group = |at: usize| at + 1 == bytes.len() || !bytes[at + 1].is_ascii_digit();
    let mut runs = Vec::new();
    for first in (0..digits.len()).filter(|&i| starts_group(digits[i])) {
        for count in 13..=19 {
            let Some(&last) = digits.get(first + count - 1) else {
                break;
            };
            let (start, end) = (digits[first], last + 1);
            if ends_group(last) && luhn(&candidate[start..end]) {
                runs.push((start, end));
            }
        }
    }
    runs
}

/// The longest start of `candidate` (15 to 34 letters and digits, spaces between) that is an
/// IBAN, as its length in bytes.
fn iban_prefix(candidate: &str) -> Option<usize> {
    let ends: Vec<usize> = (candidate.char_indices())
        .filter(|(_, c)| c.is_ascii_alphanumeric())
        .map(|(at, _)| at + 1)
        .collect();
    (15..=ends.len().min(34))
        .rev()
        .map(|count| ends[count - 1])
        .find(|&end| iban(&candidate[..end]))
}

/// The Luhn check over the digits of `candidate` (13 to 19 of them).
pub fn luhn(candidate: &str) -> bool {
    let digits: Vec<u32> = candidate.chars().filter_map(|c| c.to_digit(10)).collect();
    if !(13..=19).contains(&digits.len()) {
        return false;
    }
    let sum: u32 = (digits.iter().rev().enumerate())
        .map(|(i, &d)| match i % 2 {
            0 => d,
            _ if d * 2 > 9 => d * 2 - 9,
            _ => d * 2,
        })
        .sum();
    sum.is_multiple_of(10)
}

/// ISO 13616's check of `candidate` (spaces allowed): 15 to 34 characters, mod 97 = 1.
pub fn iban(candidate: &str) -> bool {
    let compact: Vec<u8> = candidate.bytes().filter(|b| *b != b' ').collect();
    if !(15..=34).contains(&compact.len()) {
        return false;
    }
    let (head, tail) = compact.split_at(4);
    let mut remainder: u32 = 0;
    for &byte in tail.iter().chain(head) {
        let value = match byte {
            b'0'..=b'9' => u32::from(byte - b'0'),
            b'A'..=b'Z' => u32::from(byte - b'A') + 10,
            _ => return false,
        };
        // A letter is two digits.
        let width = if value > 9 { 100 } else { 10 };
        remainder = (remainder * width + value) % 97;
    }
    remainder == 1
}

/// Whether `candidate` is a well-formed peergate credential of any kind (its CRC holds).
fn peergate_credential(candidate: &str) -> bool {
    use crate::token::CredentialKind;
    [
        CredentialKind::PeerToken,
        CredentialKind::ApiKey,
        CredentialKind::AdminToken,
    ]
    .into_iter()
    .any(|kind| crate::token::parse(kind, candidate).is_ok())
}
