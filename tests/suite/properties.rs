//! Invariants checked over generated inputs (proptest): canonicalization is idempotent, a
//! credential survives format and parse, and the limiter never admits more than its budget.

use peergate::jose::sign;
use peergate::layers::limit::{Decision, KeyedGcra, Quota};
use peergate::token::{self, CredentialKind};
use proptest::prelude::*;
use serde_json::Value;

/// Arbitrary JSON values of bounded size, numbers included.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(Value::from),
        (-1.0e30f64..1.0e30)
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-zA-Z0-9 é☕\"\\\\/\u{0}-\u{1f}]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z€\u{1f600}]{0,4}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn canonicalization_is_idempotent(fields in prop::collection::btree_map("[a-zA-Z]{1,6}", json_value(), 0..8)) {
        let card = Value::Object(fields.into_iter().collect());
        let once = sign::canonical_payload(&card).unwrap();
        let parsed: Value = serde_json::from_str(&once).unwrap();
        prop_assert_eq!(sign::canonical_payload(&parsed).unwrap(), once);
    }

    #[test]
    fn a_credential_survives_format_and_parse(id in "[0-9A-Za-z]{12}", secret in "[0-9A-Za-z]{32}", api in any::<bool>()) {
        let kind = if api { CredentialKind::ApiKey } else { CredentialKind::PeerToken };
        let text = token::assemble(kind, &id, &secret);
        let parsed = token::parse(kind, &text).unwrap();
        prop_assert_eq!(parsed.token_id, id.as_str());
        prop_assert_eq!(parsed.secret(), secret.as_str());
    }

    #[test]
    fn the_limiter_never_admits_more_than_its_burst_plus_what_time_refills(
        count in 1u32..200,
        steps in prop::collection::vec(0u64..5_000_000_000, 1..300),
    ) {
        // GCRA's promise: over any stretch of length L from a rested start, at most
        // burst + L / interval requests pass.
        let quota = Quota::per_minute(count);
        let interval = 60_000_000_000i128 / i128::from(count);
        let limiter = KeyedGcra::new(16);
        let mut now: i64 = 0;
        let mut admitted = 0i128;
        for step in steps {
            now += step as i64;
            if let Decision::Allowed { .. } = limiter.check(&"k", quota, now) {
                admitted += 1;
            }
            let bound = i128::from(count) + i128::from(now) / interval + 1;
            prop_assert!(admitted <= bound, "{} admitted by {} ns, bound {}", admitted, now, bound);
        }
    }
}
