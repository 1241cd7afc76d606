//! The policies as peergate reads and applies them: every fact a policy can read, the slicing
//! by action against Cedar's own decision over the whole set, and each refused file.

use super::ask::{AdminAsk, CallAsk, PeerFacts};
use super::load::{LoadError, Loaded};
use super::schema::{self, BUILT_IN};
use crate::clock::Timestamp;
use cedar_policy::{Authorizer, Entities, PolicySet, Schema};
use std::str::FromStr;

fn schema() -> Schema {
    Schema::from_cedarschema_str(BUILT_IN).unwrap().0
}

fn loaded(text: &str) -> Loaded {
    Loaded::from_text(text, &schema()).unwrap_or_else(|e| panic!("{e}"))
}

fn refused(text: &str) -> LoadError {
    Loaded::from_text(text, &schema()).unwrap_err()
}

const GROUPS: &[crate::jose::access_token::Claim] = &[];

fn peer(claims: &[crate::jose::access_token::Claim]) -> PeerFacts<'_> {
    PeerFacts {
        id: "peer-1",
        name: "acme",
        owner_id: "owner-1",
        scheme: "jwt",
        issuer: Some("idp"),
        subject: Some("acme-app"),
        scopes: None,
        claims,
    }
}

/// SendMessage of one text part, Friday 2026-12-04 at 10:30 UTC from 10.1.2.3.
fn call<'a>(peer: PeerFacts<'a>, operation: &'static str) -> CallAsk<'a> {
    CallAsk {
        peer,
        operation,
        binding: "JSONRPC",
        client: Some("10.1.2.3".parse().unwrap()),
        now: Timestamp::from_str("2026-12-04T10:30:00Z").unwrap(),
        task: None,
        context: None,
        message_size: 5,
        part_kinds: vec!["text"],
        media_types: Vec::new(),
        extensions: &[],
    }
}

#[test]
fn office_hours_a_network_a_part_kind_and_a_group_are_read_from_the_call() {
    let policies = loaded(
        r#"
        @id("office-hours")
        permit (principal, action in Peergate::Action::"a2a", resource)
        when { context.weekday != "saturday" && context.weekday != "sunday"
               && context.hour >= 8 && context.hour < 18 };
        @id("own-network")
        forbid (principal is Peergate::Peer, action, resource)
        unless { context has client && context.client.isInRange(ip("10.0.0.0/8")) };
        @id("text-only")
        forbid (principal is Peergate::Peer, action, resource)
        when { context.partKinds.contains("file") || context.messageSize > 1024 };
        @id("auditors-group")
        forbid (principal, action == Peergate::Action::"SendMessage", resource)
        when { principal.hasTag("groups") && principal.getTag("groups").contains("auditors") };
        "#,
    );
    let decide = |ask: &CallAsk<'_>| {
        let decision = policies.decide_call(ask);
        (decision.allowed, decision.policy_list())
    };
    let at_ten = call(peer(GROUPS), "SendMessage");
    assert_eq!(decide(&at_ten), (true, "office-hours".into()));
    let mut late = at_ten.clone();
    late.now = Timestamp::from_str("2026-12-04T19:00:00Z").unwrap();
    assert_eq!(decide(&late), (false, "default".into()));
    let mut saturday = at_ten.clone();
    saturday.now = Timestamp::from_str("2026-12-05T10:30:00Z").unwrap();
    assert!(!decide(&saturday).0);
    let mut outside = at_ten.clone();
    outside.client = Some("192.0.2.7".parse().unwrap());
    assert_eq!(decide(&outside), (false, "own-network".into()));
    let mut unknown = at_ten.clone();
    unknown.client = None;
    assert_eq!(decide(&unknown), (false, "own-network".into()));
    let mut file = at_ten.clone();
    file.part_kinds = vec!["text", "file"];
    assert_eq!(decide(&file), (false, "text-only".into()));
    let mut large = at_ten.clone();
    large.message_size = 4096;
    assert!(!decide(&large).0);
    let auditors: [crate::jose::access_token::Claim; 1] = [(
        "groups".into(),
        vec!["staff".into(), "auditors".into()].into(),
    )];
    assert_eq!(
        decide(&call(peer(&auditors), "SendMessage")),
        (false, "auditors-group".into())
    );
    assert!(decide(&call(peer(&auditors), "GetTask")).0);
}

#[test]
fn a_task_sits_in_its_conversation_and_a_peer_in_its_owner() {
    let policies = loaded(
        r#"
        permit (principal in Peergate::Owner::"owner-1", action, resource in Peergate::Context::"c-1");
        "#,
    );
    let mut ask = call(peer(GROUPS), "SendMessage");
    assert!(!policies.decide_call(&ask).allowed);
    ask.context = Some("c-1");
    ask.task = Some("t-1");
    assert!(policies.decide_call(&ask).allowed);
    let mut other = ask.clone();
    other.peer.owner_id = "owner-2";
    assert!(!policies.decide_call(&other).allowed);
}

/// Cedar's own decision over the whole set, every action entity in the store.
fn unsliced(
    text: &str,
    request: cedar_policy::Request,
    mut entities: Vec<cedar_policy::Entity>,
) -> bool {
    let schema = schema();
    let actions = schema.action_entities().unwrap();
    entities.extend(actions.iter().cloned());
    let entities = Entities::from_entities(entities, None).unwrap();
    let set = PolicySet::from_str(text).unwrap();
    Authorizer::new()
        .is_authorized(&request, &set, &entities)
        .decision()
        == cedar_policy::Decision::Allow
}

#[test]
fn slicing_by_action_decides_as_cedar_does_over_the_whole_set() {
    let text = r#"
        permit (principal, action == Peergate::Action::"GetTask", resource);
        permit (principal, action in [Peergate::Action::"ListTasks", Peergate::Action::"CancelTask"], resource);
        permit (principal, action in Peergate::Action::"read-only", resource) when { context.hour < 12 };
        forbid (principal, action in Peergate::Action::"a2a", resource) when { context.partKinds.contains("file") };
        permit (principal is Peergate::Peer, action, resource) when { principal.name == "acme" && context.messageSize > 3 };
        permit (principal, action in Peergate::Action::"admin.read", resource);
        forbid (principal is Peergate::Administrator, action == Peergate::Action::"revoke", resource);
    "#;
    let policies = loaded(text);
    let mut asked = 0;
    // Twice over: the second pass is answered from the remembered decisions, which must be
    // Cedar's too.
    let twice = [("acme", 5), ("other", 5), ("acme", 1)].repeat(2);
    for (name, size) in twice {
        for method in crate::protocol::jsonrpc::Method::ALL {
            let mut ask = call(peer(GROUPS), method.name());
            ask.peer.name = name;
            ask.message_size = size;
            let (request, entities) = ask.to_cedar().unwrap();
            let sliced = policies.decide_call(&ask).allowed;
            assert_eq!(
                sliced,
                unsliced(text, request, entities),
                "{name} {method:?}"
            );
            asked += 1;
        }
    }
    for operation in schema::ADMIN_OPERATIONS {
        let ask = AdminAsk {
            name: "ada",
            auditor: false,
            operation,
            method: "GET",
            peer: None,
            client: None,
            now: Timestamp::UNIX_EPOCH,
        };
        let (request, entities) = ask.to_cedar().unwrap();
        let sliced = policies.decide_admin(&ask).allowed;
        assert_eq!(sliced, unsliced(text, request, entities), "{operation}");
        asked += 1;
    }
    assert_eq!(asked, 6 * 11 + schema::ADMIN_OPERATIONS.len());
}

#[test]
fn each_refused_file_names_the_policy_or_the_line_and_the_problem() {
    let unknown_action = refused(
        "@id(\"typo\")\npermit (principal, action == Peergate::Action::\"SendMesage\", resource);",
    );
    assert!(
        matches!(&unknown_action, LoadError::Invalid { policy, problem }
            if policy == "typo" && problem.contains("SendMesage")),
        "{unknown_action}"
    );
    let attribute = refused(
        "permit (principal is Peergate::Peer, action, resource) when { principal.nme == \"x\" };",
    );
    assert!(
        matches!(&attribute, LoadError::Invalid { policy, problem }
            if policy == "policy0" && problem.contains("nme")),
        "{attribute}"
    );
    let syntax = refused("\n\npermit (principal, action, resource) when { principal.name == };");
    assert!(
        matches!(syntax, LoadError::Syntax { line: 3, .. }),
        "{syntax}"
    );
    let deep = format!(
        "permit (principal, action, resource) when {{ {}true{} }};",
        "(".repeat(100),
        ")".repeat(100)
    );
    assert!(matches!(refused(&deep), LoadError::TooDeep { line: 1, .. }));
    let template = refused("permit (principal == ?principal, action, resource);");
    assert!(matches!(template, LoadError::Template { .. }), "{template}");
    let twice = refused(
        "@id(\"a\") permit (principal, action, resource);\n@id(\"a\") forbid (principal, action, resource);",
    );
    assert_eq!(twice, LoadError::DuplicateId { policy: "a".into() });
    assert_eq!(refused("// nothing\n"), LoadError::Empty);
}

#[test]
fn an_operators_schema_must_describe_every_request_peergate_makes() {
    let without_get = BUILT_IN.replace("\"GetTask\", ", "");
    let schema = Schema::from_cedarschema_str(&without_get).unwrap().0;
    let why = schema::describes_peergate(&schema).unwrap_err();
    assert!(
        matches!(&why, LoadError::SchemaMismatch { action, .. } if action == "GetTask"),
        "{why}"
    );
    let retyped = BUILT_IN.replace("    name: String,", "    name: Long,");
    let schema = Schema::from_cedarschema_str(&retyped).unwrap().0;
    assert!(schema::describes_peergate(&schema).is_err());
    schema::describes_peergate(&self::schema()).unwrap();
}

#[test]
fn files_too_large_or_unreadable_are_named_by_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.cedar");
    std::fs::write(&huge, "// x\n".repeat(300_000)).unwrap();
    let files = super::PolicyFiles {
        policies: huge,
        schema: None,
    };
    assert_eq!(
        Loaded::read(&files).unwrap_err(),
        LoadError::TooLarge {
            key: "authorization.policies"
        }
    );
    let missing = super::PolicyFiles {
        policies: dir.path().join("missing.cedar"),
        schema: Some(dir.path().join("missing.cedarschema")),
    };
    let why = Loaded::read(&missing).unwrap_err().to_string();
    assert!(
        why.starts_with("authorization.schema: the file cannot be read"),
        "{why}"
    );
    assert!(!why.contains("missing.cedarschema"), "no path: {why}");
}
