//! The shared test support keeps the promises the suites rely on: a policy edit that names a
//! key the policy does not have fails instead of leaving the default in place, and the store
//! engine is one the suites know.

use crate::common::*;
use peergate::config::EMBEDDED_DEFAULT;

/// The panic message of `f`.
fn panic_of(f: impl FnOnce() + std::panic::UnwindSafe) -> String {
    let payload = std::panic::catch_unwind(f).expect_err("it must panic");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[test]
fn the_unedited_policy_is_the_embedded_default_byte_for_byte() {
    assert_eq!(PolicyEdit::default().text(), EMBEDDED_DEFAULT);
}

#[test]
fn an_edit_changes_only_its_key_and_keeps_the_comments() {
    let text = PolicyEdit::default()
        .set("limits.per_ip_per_minute", 4)
        .text();
    assert!(text.contains("\nper_ip_per_minute = 4\n"), "{text}");
    assert!(!text.contains("per_ip_per_minute = 120"), "{text}");
    let changed: Vec<(&str, &str)> = text
        .lines()
        .zip(EMBEDDED_DEFAULT.lines())
        .filter(|(edited, default)| edited != default)
        .collect();
    assert_eq!(
        changed,
        [("per_ip_per_minute = 4", "per_ip_per_minute = 120")],
        "nothing else moved"
    );
    assert_eq!(text.lines().count(), EMBEDDED_DEFAULT.lines().count());
    let policy = PolicyEdit::default()
        .set("auth.schemes", ["bearer", "basic"])
        .text();
    assert!(
        policy.contains("\nschemes = [\"bearer\", \"basic\"]\n"),
        "{policy}"
    );
}

#[test]
fn a_key_the_policy_does_not_have_cannot_be_set_or_removed() {
    let message = panic_of(|| {
        PolicyEdit::default().set("limits.per_ip_per_minut", 4);
    });
    assert!(message.contains("limits.per_ip_per_minut"), "{message}");
    let message = panic_of(|| {
        PolicyEdit::default().set("limit.per_ip_per_minute", 4);
    });
    assert!(message.contains("limit.per_ip_per_minute"), "{message}");
    let message = panic_of(|| {
        PolicyEdit::default().remove("peers.default_ownr");
    });
    assert!(message.contains("peers.default_ownr"), "{message}");
    let message = panic_of(|| {
        PolicyEdit::default().set("server.public_base_url", "https://gw.example.org");
    });
    assert!(message.contains("use insert"), "{message}");
}

#[test]
fn insert_adds_only_what_is_not_there() {
    let message = panic_of(|| {
        PolicyEdit::default().insert("limits.per_ip_per_minute", 4);
    });
    assert!(message.contains("use set"), "{message}");
    let policy = PolicyEdit::default()
        .openai("http://127.0.0.1:9/v1", "m")
        .push_table(
            "card.extensions",
            &[("uri", "https://example.com/x".into())],
        )
        .policy();
    let text = format!("{policy:?}");
    assert!(text.contains("http://127.0.0.1:9/v1"), "{text}");
    assert!(text.contains("https://example.com/x"), "{text}");
}

#[test]
fn the_store_engine_is_sqlite_by_default_and_an_unknown_one_is_refused() {
    assert_eq!(TestStore::named(None), TestStore::Sqlite);
    assert_eq!(TestStore::named(Some("sqlite")), TestStore::Sqlite);
    let message = panic_of(|| {
        TestStore::named(Some("mysql"));
    });
    assert!(
        message.contains("mysql") && message.contains("sqlite"),
        "{message}"
    );
}
