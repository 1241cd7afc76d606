//! Verifying an identity provider's JWT access token (RFC 9068), by the rules of RFC 8725 and
//! what other gateways got wrong. Pure: keys and the time come from the caller.
//!
//! In order, each step refusing before the next costs anything:
//!
//! 1. At most [`MAX_TOKEN_BYTES`], exactly three base64url parts (a JWE has five and is
//!    refused), decoded strictly.
//! 2. The protected header: a JSON object naming each member once, with a `kid`; `crit`,
//!    `zip`, `b64` and a `cty` (a nested JWT) are refused; `jku`, `x5u`, `jwk` and `x5c` are
//!    never read. `typ` must be `at+jwt` or `application/at+jwt` (any case) unless the issuer
//!    issues plain JWTs.
//! 3. [`peek_issuer`] reads the unverified `iss` only to choose the issuer, whose keys alone
//!    are then asked for the `kid`: a key is never looked up across issuers.
//! 4. `alg` must be in the issuer's allow-list (asymmetric algorithms only) and be the key's
//!    own algorithm; then the signature.
//! 5. The claims: `iss` the issuer's exactly (a string, never an array); `aud` a string or an
//!    array containing the audience; `exp` required; `nbf` and `iat` honoured; all with the
//!    allowed skew; a lifetime no longer than the maximum; `client_id` or else `sub` a non-empty
//!    string; a token that looks like an ID token (`nonce`, `at_hash`, `c_hash`) refused.

use super::verify::TrustedKeys;
use crate::clock::Timestamp;
use crate::protocol::json::{self, Integers};
use base64::Engine as _;
use serde_json::{Map, Value};
use std::time::Duration;

/// The largest token read at all: a header larger than this is refused before decoding.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The asymmetric algorithms an issuer may allow; `none` and HMAC are not among them, whatever
/// the policy says.
pub const ASYMMETRIC_ALGORITHMS: [&str; 4] = ["RS256", "PS256", "ES256", "EdDSA"];

/// What an issuer's tokens must satisfy besides the signature.
#[derive(Debug, Clone)]
pub struct AccessTokenRules {
    /// `iss`, compared exactly.
    pub issuer: String,
    /// Must be `aud`, or in it.
    pub audience: String,
    /// The algorithms accepted, a subset of [`ASYMMETRIC_ALGORITHMS`].
    pub algorithms: Vec<String>,
    /// Whether tokens without `typ: at+jwt` are accepted (providers that issue plain JWTs).
    pub plain_jwt: bool,
    /// How far the issuer's clock may be from ours.
    pub skew: Duration,
    /// The longest lifetime accepted (`exp` - `iat`, or `exp` - now without `iat`).
    pub max_lifetime: Duration,
    /// Whether a token must name its client in `client_id`; otherwise one without it is read
    /// by its `sub`.
    pub client_id_required: bool,
    /// The claims kept for the authorization policies, by name.
    pub claims: Vec<String>,
}

/// A token whose signature and claims verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessToken {
    /// Who the token names: its `client_id`, else its `sub`.
    pub subject: String,
    /// The scopes granted (`scope`, space-separated, or a `scp` array).
    pub scopes: Vec<String>,
    /// When it expires.
    pub expires_at: Timestamp,
    /// The SHA-256 thumbprint of the client certificate it is bound to (RFC 8705
    /// `cnf.x5t#S256`, base64url), if it is bound to one.
    pub certificate_thumbprint: Option<String>,
    /// The claims the rules keep, each as a set of strings (absent claims are left out).
    pub claims: Claims,
}

/// One kept claim: its name and its values.
pub type Claim = (Box<str>, Box<[Box<str>]>);

/// Kept claims, as the authorization policies read them.
pub type Claims = std::sync::Arc<[Claim]>;

/// The most values one kept claim may hold, and the longest value: a token beyond them is
/// refused rather than read in part (a policy could forbid the part left out).
pub const MAX_CLAIM_VALUES: usize = 256;
const MAX_CLAIM_VALUE_BYTES: usize = 256;

/// Why a token was refused: for the log and the tests; the client only hears "invalid token".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenRejected {
    /// Not a compact JWS of three parts within [`MAX_TOKEN_BYTES`].
    #[error("not a compact JWS of three base64url parts within 16 KiB")]
    Malformed,
    /// The header is not usable: what is wrong with it.
    #[error("the token's header {0}")]
    Header(&'static str),
    /// No issuer in the payload, or one the policy does not name.
    #[error("the token names no issuer this door accepts")]
    UnknownIssuer,
    /// The issuer has no key with this `kid`.
    #[error("the issuer has no key with the token's kid")]
    UnknownKey,
    /// `alg` is not allowed for the issuer, or not the key's algorithm.
    #[error("the token's algorithm is not allowed for its key")]
    Algorithm,
    /// The signature does not verify.
    #[error("the signature does not verify")]
    Signature,
    /// A claim is missing or wrong: which.
    #[error("the token's {0}")]
    Claim(&'static str),
}

/// A token split into its parts, before any key is asked.
#[derive(Debug)]
pub struct Parsed<'t> {
    /// The decoded protected header.
    header: Map<String, Value>,
    /// The decoded payload.
    payload: Map<String, Value>,
    /// `BASE64URL(header) "." BASE64URL(payload)`.
    signing_input: &'t str,
    signature: Vec<u8>,
}

impl Parsed<'_> {
    /// The header's `kid`.
    pub fn kid(&self) -> &str {
        self.header
            .get("kid")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The unverified `iss`, to choose the issuer by (a string only).
    pub fn issuer(&self) -> Option<&str> {
        self.payload.get("iss").and_then(Value::as_str)
    }
}

fn b64url(part: &str) -> Result<Vec<u8>, TokenRejected> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| TokenRejected::Malformed)
}

/// Whether `text` has the shape of a compact JWS (three non-empty dot-separated parts), so a
/// Bearer credential is judged as a JWT rather than as a peer token.
pub fn looks_like_jwt(text: &str) -> bool {
    let mut parts = text.split('.');
    parts.by_ref().take(3).all(|p| !p.is_empty())
        && parts.next().is_none()
        && text.matches('.').count() == 2
}

/// Steps 1 and 2: the token's parts and a header fit to verify, before any key is asked.
pub fn parse(token: &str, plain_jwt_allowed: bool) -> Result<Parsed<'_>, TokenRejected> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenRejected::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(payload), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenRejected::Malformed);
    };
    let header = json::parse_object(&b64url(header)?, Integers::Any)
        .map_err(|_| TokenRejected::Header("is not a JSON object naming each member once"))?;
    for refused in ["crit", "zip", "b64", "cty"] {
        if header.contains_key(refused) {
            return Err(TokenRejected::Header(
                "carries crit, zip, b64 or cty, which this door does not take",
            ));
        }
    }
    match header.get("kid") {
        Some(Value::String(kid)) if !kid.is_empty() => {}
        _ => return Err(TokenRejected::Header("has no kid")),
    }
    if !header.get("alg").is_some_and(Value::is_string) {
        return Err(TokenRejected::Header("has no alg"));
    }
    let typ = header.get("typ").map(|t| t.as_str().unwrap_or("?"));
    let access_token_typ = typ.is_some_and(|t| {
        t.eq_ignore_ascii_case("at+jwt") || t.eq_ignore_ascii_case("application/at+jwt")
    });
    if !access_token_typ && !plain_jwt_allowed {
        return Err(TokenRejected::Header("is not typ at+jwt (RFC 9068)"));
    }
    let payload = json::parse_object(&b64url(payload)?, Integers::Any).map_err(|_| {
        TokenRejected::Claim("payload is not a JSON object naming each member once")
    })?;
    let signing_input = &token[..token.rfind('.').unwrap_or(0)];
    Ok(Parsed {
        header,
        payload,
        signing_input,
        signature: b64url(signature)?,
    })
}

/// What can be checked without a key: the algorithm is one the issuer's rules accept, and the
/// claims hold at `now`. A token that fails here is refused whatever key it names, so it may
/// not make anyone fetch keys.
pub fn check_claims(
    parsed: &Parsed<'_>,
    rules: &AccessTokenRules,
    now: Timestamp,
) -> Result<(), TokenRejected> {
    accepted_algorithm(parsed, rules)?;
    claims(&parsed.payload, rules, now).map(|_| ())
}

/// The header's `alg`, when the rules accept it.
fn accepted_algorithm<'p>(
    parsed: &'p Parsed<'_>,
    rules: &AccessTokenRules,
) -> Result<&'p str, TokenRejected> {
    let alg = parsed
        .header
        .get("alg")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !rules.algorithms.iter().any(|allowed| allowed == alg)
        || !ASYMMETRIC_ALGORITHMS.contains(&alg)
    {
        return Err(TokenRejected::Algorithm);
    }
    Ok(alg)
}

/// Steps 4 and 5: the signature under `keys` (the chosen issuer's alone) and the claims, at
/// `now`.
pub fn verify(
    parsed: &Parsed<'_>,
    keys: &TrustedKeys,
    rules: &AccessTokenRules,
    now: Timestamp,
) -> Result<AccessToken, TokenRejected> {
    let alg = accepted_algorithm(parsed, rules)?;
    match keys.algorithm_of(parsed.kid()) {
        None => return Err(TokenRejected::UnknownKey),
        Some(key_alg) if key_alg != alg => return Err(TokenRejected::Algorithm),
        Some(_) => {}
    }
    match keys.verify_jws(
        parsed.kid(),
        alg,
        parsed.signing_input.as_bytes(),
        &parsed.signature,
    ) {
        Ok(true) => {}
        Ok(false) | Err(_) => return Err(TokenRejected::Signature),
    }
    claims(&parsed.payload, rules, now)
}

fn claims(
    payload: &Map<String, Value>,
    rules: &AccessTokenRules,
    now: Timestamp,
) -> Result<AccessToken, TokenRejected> {
    addressed_to_this_door(payload, rules)?;
    let exp = expiry(payload, rules, now)?;
    Ok(AccessToken {
        subject: subject(payload, rules)?,
        scopes: scopes(payload)?,
        expires_at: crate::clock::from_millis(exp.saturating_mul(1000)),
        certificate_thumbprint: certificate_thumbprint(payload)?,
        claims: kept_claims(payload, &rules.claims)?,
    })
}

/// The claims `names` keeps: a string as a set of one, an array of strings; refused when one is
/// anything else (a policy could read it as present and empty), holds more than
/// [`MAX_CLAIM_VALUES`] or a longer string.
fn kept_claims(payload: &Map<String, Value>, names: &[String]) -> Result<Claims, TokenRejected> {
    let mut kept = Vec::with_capacity(names.len());
    for name in names {
        let values: Vec<&str> = match payload.get(name) {
            None => continue,
            Some(Value::String(one)) => vec![one.as_str()],
            Some(Value::Array(many)) => many
                .iter()
                .map(Value::as_str)
                .collect::<Option<_>>()
                .ok_or(TokenRejected::Claim(
                    "a claim the policies read holds something other than strings",
                ))?,
            Some(_) => {
                return Err(TokenRejected::Claim(
                    "a claim the policies read is neither a string nor a list of strings",
                ));
            }
        };
        if values.len() > MAX_CLAIM_VALUES || values.iter().any(|v| v.len() > MAX_CLAIM_VALUE_BYTES)
        {
            return Err(TokenRejected::Claim(
                "a claim the policies read holds more than 256 values, or one longer than 256 bytes",
            ));
        }
        let values = values.into_iter().map(Box::from).collect();
        kept.push((name.as_str().into(), values));
    }
    Ok(kept.into())
}

/// Who the token names: its `client_id`, a non-empty string when present (anything else is
/// refused, never read as absent); without one, its `sub`, unless the issuer's rules require
/// `client_id`.
fn subject(
    payload: &Map<String, Value>,
    rules: &AccessTokenRules,
) -> Result<String, TokenRejected> {
    match payload.get("client_id") {
        Some(Value::String(id)) if !id.is_empty() => Ok(id.clone()),
        Some(_) => Err(TokenRejected::Claim("client_id is empty or not a string")),
        None if rules.client_id_required => Err(TokenRejected::Claim(
            "client_id is missing, and this issuer takes no sub in its place",
        )),
        None => match payload.get("sub") {
            Some(Value::String(sub)) if !sub.is_empty() => Ok(sub.clone()),
            Some(_) => Err(TokenRejected::Claim("sub is empty or not a string")),
            None => Err(TokenRejected::Claim("client_id and sub are both missing")),
        },
    }
}

/// The issuer's, for this door, and an access token rather than an ID token.
fn addressed_to_this_door(
    payload: &Map<String, Value>,
    rules: &AccessTokenRules,
) -> Result<(), TokenRejected> {
    if payload.get("iss").and_then(Value::as_str) != Some(rules.issuer.as_str()) {
        return Err(TokenRejected::Claim("iss is not the issuer's"));
    }
    let audience_matches = match payload.get("aud") {
        Some(Value::String(aud)) => *aud == rules.audience,
        Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(&rules.audience)),
        _ => false,
    };
    if !audience_matches {
        return Err(TokenRejected::Claim("aud does not name this door"));
    }
    for id_token_claim in ["nonce", "at_hash", "c_hash"] {
        if payload.contains_key(id_token_claim) {
            return Err(TokenRejected::Claim(
                "claims are an ID token's, not an access token's",
            ));
        }
    }
    Ok(())
}

/// `exp` (in seconds, as the token says), once `exp`, `nbf` and `iat` hold at `now` within the
/// skew and the lifetime is within the issuer's maximum.
fn expiry(
    payload: &Map<String, Value>,
    rules: &AccessTokenRules,
    now: Timestamp,
) -> Result<i64, TokenRejected> {
    let seconds = |name: &str| -> Result<Option<i64>, TokenRejected> {
        match payload.get(name) {
            None => Ok(None),
            Some(value) => value
                .as_i64()
                .or_else(|| value.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
                .map(Some)
                .ok_or(TokenRejected::Claim("time claims are not numbers")),
        }
    };
    let skew = i64::try_from(rules.skew.as_secs()).unwrap_or(i64::MAX);
    let now_s = now.as_second();
    let exp = seconds("exp")?.ok_or(TokenRejected::Claim("exp is missing"))?;
    if now_s >= exp.saturating_add(skew) {
        return Err(TokenRejected::Claim("exp has passed"));
    }
    if seconds("nbf")?.is_some_and(|nbf| nbf > now_s.saturating_add(skew)) {
        return Err(TokenRejected::Claim("nbf is in the future"));
    }
    let iat = seconds("iat")?;
    if iat.is_some_and(|iat| iat > now_s.saturating_add(skew)) {
        return Err(TokenRejected::Claim("iat is in the future"));
    }
    let lifetime = exp.saturating_sub(iat.unwrap_or(now_s));
    if lifetime > i64::try_from(rules.max_lifetime.as_secs()).unwrap_or(i64::MAX) {
        return Err(TokenRejected::Claim(
            "lifetime is longer than the issuer's maximum",
        ));
    }
    Ok(exp)
}

/// The granted scopes: RFC 9068's space-separated `scope`, or a `scp` list.
fn scopes(payload: &Map<String, Value>) -> Result<Vec<String>, TokenRejected> {
    Ok(match (payload.get("scope"), payload.get("scp")) {
        (Some(Value::String(scope)), _) => scope
            .split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect(),
        (None, Some(Value::Array(list))) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        (None, None) => Vec::new(),
        _ => {
            return Err(TokenRejected::Claim(
                "scope is neither a string nor a scp list",
            ));
        }
    })
}

/// The certificate the token is bound to (RFC 8705 `cnf.x5t#S256`), if any.
fn certificate_thumbprint(payload: &Map<String, Value>) -> Result<Option<String>, TokenRejected> {
    match payload.get("cnf") {
        None => Ok(None),
        Some(cnf) => match cnf.get("x5t#S256") {
            Some(Value::String(thumbprint)) => Ok(Some(thumbprint.clone())),
            // A confirmation this door cannot check (a DPoP key, say) is not ignored.
            _ => Err(TokenRejected::Claim(
                "cnf names a confirmation this door cannot check",
            )),
        },
    }
}

/// Looks at the unverified `iss` of a token, to choose its issuer.
pub fn peek_issuer<'p>(parsed: &'p Parsed<'_>) -> Result<&'p str, TokenRejected> {
    parsed.issuer().ok_or(TokenRejected::UnknownIssuer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer as _;
    use serde_json::json;

    const ISSUER: &str = "https://idp.acme.example";
    const AUDIENCE: &str = "https://gw.example.com/a2a/v1";
    const NOW: i64 = 1_800_000_000_000;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    struct Keys {
        ec: p256::ecdsa::SigningKey,
        ed: ed25519_dalek::SigningKey,
        trusted: TrustedKeys,
    }

    fn keys() -> Keys {
        let ec = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).unwrap();
        let ed = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
        let point = ec.verifying_key().to_sec1_point(false);
        let point = point.as_bytes();
        let jwks = json!({"keys": [
            {"kty": "EC", "crv": "P-256", "kid": "ec1", "x": b64(&point[1..33]), "y": b64(&point[33..65])},
            {"kty": "OKP", "crv": "Ed25519", "kid": "ed1", "x": b64(ed.verifying_key().as_bytes())},
        ]});
        let mut trusted = TrustedKeys::new();
        trusted.add_issuer_jwks(&jwks.to_string()).unwrap();
        Keys { ec, ed, trusted }
    }

    fn rules() -> AccessTokenRules {
        AccessTokenRules {
            issuer: ISSUER.to_owned(),
            audience: AUDIENCE.to_owned(),
            algorithms: vec!["ES256".into(), "EdDSA".into(), "RS256".into()],
            plain_jwt: false,
            skew: Duration::from_secs(60),
            max_lifetime: Duration::from_secs(24 * 3600),
            client_id_required: false,
            claims: Vec::new(),
        }
    }

    fn claims() -> Value {
        json!({"iss": ISSUER, "aud": AUDIENCE, "exp": NOW / 1000 + 300, "iat": NOW / 1000,
               "client_id": "partner-a", "sub": "svc", "scope": "a2a:message a2a:tasks:read"})
    }

    fn token(keys: &Keys, header: &Value, payload: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(payload.to_string().as_bytes())
        );
        let signature = match header["alg"].as_str() {
            Some("EdDSA") => {
                use ed25519_dalek::Signer as _;
                keys.ed.sign(input.as_bytes()).to_bytes().to_vec()
            }
            _ => {
                let signature: p256::ecdsa::Signature = keys.ec.sign(input.as_bytes());
                signature.to_bytes().to_vec()
            }
        };
        format!("{input}.{}", b64(&signature))
    }

    fn header() -> Value {
        json!({"alg": "ES256", "kid": "ec1", "typ": "at+jwt"})
    }

    fn check(token: &str, rules: &AccessTokenRules) -> Result<AccessToken, TokenRejected> {
        let parsed = parse(token, rules.plain_jwt)?;
        verify(
            &parsed,
            &keys().trusted,
            rules,
            crate::clock::from_millis(NOW),
        )
    }

    #[test]
    fn a_good_token_names_its_client_and_scopes() {
        let keys = keys();
        let verified = check(&token(&keys, &header(), &claims()), &rules()).unwrap();
        assert_eq!(verified.subject, "partner-a");
        assert_eq!(verified.scopes, ["a2a:message", "a2a:tasks:read"]);
        assert_eq!(verified.expires_at.as_millisecond(), NOW + 300_000);
        let ed = json!({"alg": "EdDSA", "kid": "ed1", "typ": "application/AT+JWT"});
        assert!(check(&token(&keys, &ed, &claims()), &rules()).is_ok());
        // sub when there is no client_id; aud as an array.
        let mut payload = claims();
        payload.as_object_mut().unwrap().remove("client_id");
        payload["aud"] = json!(["other", AUDIENCE]);
        assert_eq!(
            check(&token(&keys, &header(), &payload), &rules())
                .unwrap()
                .subject,
            "svc"
        );
    }

    #[test]
    fn kept_claims_are_strings_or_lists_of_strings_and_nothing_is_read_in_part() {
        let keys = keys();
        let rules = AccessTokenRules {
            claims: vec!["groups".into(), "dept".into(), "absent".into()],
            ..rules()
        };
        let with = |groups: Value| {
            let mut payload = claims();
            payload["groups"] = groups;
            payload["dept"] = json!("sales");
            check(&token(&keys, &header(), &payload), &rules)
        };
        let kept = with(json!(["a", "b"])).unwrap().claims;
        let expected: Vec<Claim> = vec![
            ("groups".into(), vec!["a".into(), "b".into()].into()),
            ("dept".into(), vec!["sales".into()].into()),
        ];
        assert_eq!(&*kept, &expected[..]);
        for refused in [
            json!(["a", 1]),
            json!(false),
            json!(null),
            json!({"a": "b"}),
        ] {
            assert!(
                matches!(with(refused.clone()), Err(TokenRejected::Claim(_))),
                "{refused}"
            );
        }
        let many: Vec<String> = (0..=MAX_CLAIM_VALUES).map(|i| i.to_string()).collect();
        assert!(with(json!(many)).is_err());
    }

    #[test]
    fn every_rule_refuses_its_token() {
        let keys = keys();
        let with = |edit: &dyn Fn(&mut Value, &mut Value)| {
            let (mut header, mut payload) = (header(), claims());
            edit(&mut header, &mut payload);
            check(&token(&keys, &header, &payload), &rules())
        };
        let claim = |why| Err(TokenRejected::Claim(why));
        assert_eq!(
            with(&|_, p| p["iss"] = json!([ISSUER])),
            claim("iss is not the issuer's")
        );
        assert_eq!(
            with(&|_, p| p["iss"] = json!(format!("{ISSUER}/"))),
            claim("iss is not the issuer's")
        );
        assert_eq!(
            with(&|_, p| p["aud"] = json!("https://gw.example.com")),
            claim("aud does not name this door")
        );
        assert_eq!(
            with(&|_, p| p["aud"] = json!([])),
            claim("aud does not name this door")
        );
        assert_eq!(
            with(&|_, p| {
                p.as_object_mut().unwrap().remove("exp");
            }),
            claim("exp is missing")
        );
        assert_eq!(
            with(&|_, p| p["exp"] = json!(NOW / 1000 - 61)),
            claim("exp has passed")
        );
        assert!(
            with(&|_, p| p["exp"] = json!(NOW / 1000 - 59)).is_ok(),
            "within the skew"
        );
        assert_eq!(
            with(&|_, p| p["nbf"] = json!(NOW / 1000 + 61)),
            claim("nbf is in the future")
        );
        assert_eq!(
            with(&|_, p| p["iat"] = json!(NOW / 1000 + 61)),
            claim("iat is in the future")
        );
        assert_eq!(
            with(&|_, p| p["exp"] = json!("soon")),
            claim("time claims are not numbers")
        );
        assert_eq!(
            with(&|_, p| p["exp"] = json!(NOW / 1000 + 2 * 24 * 3600)),
            claim("lifetime is longer than the issuer's maximum")
        );
        assert_eq!(
            with(&|_, p| p["nonce"] = json!("n")),
            claim("claims are an ID token's, not an access token's")
        );
        assert_eq!(
            with(&|_, p| {
                let o = p.as_object_mut().unwrap();
                o.remove("client_id");
                o.remove("sub");
            }),
            claim("client_id and sub are both missing")
        );
        // A client_id that is there but unusable is refused, never read as absent.
        for unusable in [json!(""), json!(42), json!(["a"])] {
            assert_eq!(
                with(&|_, p| p["client_id"] = unusable.clone()),
                claim("client_id is empty or not a string"),
                "{unusable}"
            );
        }
        assert_eq!(
            with(&|_, p| {
                p.as_object_mut().unwrap().remove("client_id");
                p["sub"] = json!(7);
            }),
            claim("sub is empty or not a string")
        );
        // Without client_id the sub is read, unless the issuer requires client_id.
        let mut payload = claims();
        payload.as_object_mut().unwrap().remove("client_id");
        let by_sub = token(&keys, &header(), &payload);
        assert_eq!(
            check(&by_sub, &rules()).map(|t| t.subject),
            Ok("svc".into())
        );
        let strict = AccessTokenRules {
            client_id_required: true,
            ..rules()
        };
        assert_eq!(
            check(&by_sub, &strict),
            claim("client_id is missing, and this issuer takes no sub in its place")
        );
        assert_eq!(
            with(&|_, p| p["cnf"] = json!({"jkt": "x"})),
            claim("cnf names a confirmation this door cannot check")
        );
        // The header.
        assert!(matches!(
            with(&|h, _| h["typ"] = json!("JWT")),
            Err(TokenRejected::Header(_))
        ));
        assert!(matches!(
            with(&|h, _| {
                h.as_object_mut().unwrap().remove("typ");
            }),
            Err(TokenRejected::Header(_))
        ));
        for refused in ["crit", "zip", "cty", "b64"] {
            assert!(
                matches!(
                    with(&|h, _| h[refused] = json!("x")),
                    Err(TokenRejected::Header(_))
                ),
                "{refused}"
            );
        }
        assert!(matches!(
            with(&|h, _| {
                h.as_object_mut().unwrap().remove("kid");
            }),
            Err(TokenRejected::Header(_))
        ));
        assert_eq!(
            with(&|h, _| h["kid"] = json!("elsewhere")),
            Err(TokenRejected::UnknownKey)
        );
        // A key carried in the header is never used: the token still needs the issuer's key.
        assert_eq!(
            with(&|h, _| {
                h["kid"] = json!("attacker");
                h["jwk"] = json!({"kty": "EC"});
                h["jku"] = json!("https://evil/");
            }),
            Err(TokenRejected::UnknownKey)
        );
        // alg: none, HMAC, a name not allowed, or another key's algorithm.
        for alg in ["none", "HS256", "ES384", "EdDSA"] {
            assert_eq!(
                with(&|h, _| h["alg"] = json!(alg)),
                Err(TokenRejected::Algorithm),
                "{alg}"
            );
        }
        // The plain-JWT switch admits a JWT typ, never an ID token.
        let mut plain = rules();
        plain.plain_jwt = true;
        let jwt_header = json!({"alg": "ES256", "kid": "ec1", "typ": "JWT"});
        assert!(check(&token(&keys, &jwt_header, &claims()), &plain).is_ok());
        let mut id_token = claims();
        id_token["at_hash"] = json!("h");
        assert!(check(&token(&keys, &jwt_header, &id_token), &plain).is_err());
    }

    #[test]
    fn a_changed_byte_or_shape_is_refused() {
        let keys = keys();
        let good = token(&keys, &header(), &claims());
        let mut payload = claims();
        payload["scope"] = json!("a2a:message a2a:push");
        let forged = format!(
            "{}.{}.{}",
            good.split('.').next().unwrap(),
            b64(payload.to_string().as_bytes()),
            good.rsplit('.').next().unwrap()
        );
        assert_eq!(check(&forged, &rules()), Err(TokenRejected::Signature));
        assert_eq!(
            check(&format!("{good}.x.y"), &rules()),
            Err(TokenRejected::Malformed),
            "a JWE's five parts"
        );
        assert_eq!(
            check(&"a".repeat(MAX_TOKEN_BYTES + 1), &rules()),
            Err(TokenRejected::Malformed)
        );
        // A repeated member in the header or the payload.
        let repeated = format!(
            "{}.{}.{}",
            b64(br#"{"alg":"ES256","kid":"ec1","typ":"at+jwt","kid":"ec1"}"#),
            good.split('.').nth(1).unwrap(),
            good.rsplit('.').next().unwrap()
        );
        assert!(matches!(
            check(&repeated, &rules()),
            Err(TokenRejected::Header(_))
        ));
        assert!(looks_like_jwt(&good));
        assert!(!looks_like_jwt("pgt_abc"));
        assert!(!looks_like_jwt("a..b"));
        assert!(!looks_like_jwt("a.b.c.d"));
    }

    #[test]
    fn issuer_key_sets_skip_what_they_cannot_use_and_check_what_they_load() {
        let mut keys = TrustedKeys::new();
        let small_rsa = json!({"kty": "RSA", "kid": "small", "n": b64(&[0xC5; 128]), "e": "AQAB"});
        let even_rsa = json!({"kty": "RSA", "kid": "even", "n": b64(&[0xC4; 256]), "e": "AQAB"});
        let encryption =
            json!({"kty": "RSA", "kid": "enc", "use": "enc", "n": b64(&[0xC5; 256]), "e": "AQAB"});
        let off_curve = json!({"kty": "EC", "crv": "P-256", "kid": "off", "x": b64(&[1; 32]), "y": b64(&[2; 32])});
        let small_order =
            json!({"kty": "OKP", "crv": "Ed25519", "kid": "weak", "x": b64(&[0; 32])});
        let good = json!({"kty": "RSA", "kid": "good", "n": b64(&[0xC5; 256]), "e": "AQAB"});
        let set = json!({"keys": [small_rsa, even_rsa, encryption, off_curve, small_order, good]});
        assert_eq!(keys.add_issuer_jwks(&set.to_string()), Ok(5));
        assert_eq!((keys.len(), keys.algorithm_of("good")), (1, Some("RS256")));
        // Two usable keys with one kid: the set is refused, not read first-wins.
        let twin = json!({"kty": "RSA", "kid": "good", "n": b64(&[0xC7; 256]), "e": "AQAB"});
        let twins = json!({"keys": [good.clone(), twin]});
        let refused = TrustedKeys::new().add_issuer_jwks(&twins.to_string());
        assert!(refused.is_err_and(|why| why.0.contains("two keys")));
        // An unusable key sharing a usable one's kid is only skipped.
        let odd_twin = json!({"kty": "RSA", "kid": "good", "n": b64(&[0xC5; 128]), "e": "AQAB"});
        let set = json!({"keys": [good, odd_twin]});
        assert_eq!(TrustedKeys::new().add_issuer_jwks(&set.to_string()), Ok(1));
        let none_usable = json!({"keys": [json!({"kty": "oct", "kid": "s", "k": "c2VjcmV0"})]});
        assert!(
            TrustedKeys::new()
                .add_issuer_jwks(&none_usable.to_string())
                .is_err()
        );
    }
}
