//! The agent's own tests: truncation, the sweeps that fail interrupted tasks, and the order in
//! which a task's states are heard.

use super::message::truncate_text;
use super::recovery::interrupted_text;
use super::turn_run::working_text;
use super::turn_task::new_task;
use super::{Agent, AgentSettings, SharedState};
use crate::admin::budget::Budgets;
use crate::clock::Clock;
use crate::clock::{Timestamp, later};
use crate::layers::auth::AuthenticatedPeer;
use crate::layers::metrics::Metrics;
use crate::protocol::types::{self as a2a, Task, TaskState};
use crate::shared::events::TaskEvent;
use crate::shared::events::TaskEvents;
use crate::shared::ownership::TaskOwnership;
use crate::store::Exchange;
use std::sync::Arc;
use std::time::Duration;

fn at(millis: i64) -> Timestamp {
    crate::clock::from_millis(millis)
}

#[test]
fn truncates_on_a_character_boundary_with_a_marker() {
    let text = "é".repeat(10); // 20 bytes
    let cut = truncate_text(text, 5);
    assert!(cut.starts_with("éé\n[peergate: message truncated from 20 to 4 bytes]"));
    assert_eq!(truncate_text("short".into(), 5), "short");
}

#[tokio::test]
async fn working_tasks_are_failed_as_interrupted_once_past_the_cutoff() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(dir.path()).await.unwrap();
    let heard = Arc::new(Heard::default());
    let shared = SharedState {
        events: heard.clone(),
        ..SharedState::default()
    };
    let agent = agent_over(&store, shared).await;
    let now = clock().now();
    let task = new_task(
        &"t1".into(),
        &"c1".into(),
        &"m1".into(),
        vec![crate::protocol::types::Part::text("hello")],
        TaskState::Working,
        vec![a2a::Part::text(working_text("model"))],
        now,
    );
    store
        .tasks()
        .save_exchange(Exchange {
            task_id: "t1".into(),
            peer_id: "p1".into(),
            context_id: "c1".into(),
            state: TaskState::Working,
            task_json: serde_json::to_string(&task).unwrap(),
            now,
            expires_at: later(now, Duration::from_secs(3_600)),
            messages: Vec::new(),
            usage: None,
            audit: None,
            instance: None,
            notify: false,
            push_config: None,
            upstream_task_id: None,
            receipt: None,
            call_trace: None,
            sealing: None,
        })
        .await
        .unwrap();
    // Still within its turn: left alone.
    assert_eq!(agent.fail_interrupted_tasks(Some(now)).await.unwrap(), 0);
    assert_eq!(
        agent
            .fail_interrupted_tasks(Some(later(now, Duration::from_millis(1))))
            .await
            .unwrap(),
        1
    );
    let stored: Task = serde_json::from_str(
        &store
            .tasks()
            .find_task(&"p1".into(), &"t1".into(), now)
            .await
            .unwrap()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(stored.status.state, TaskState::Failed);
    assert_eq!(
        stored.status.message.parts[0].as_text(),
        Some(interrupted_text("model").as_str())
    );
    assert_eq!(stored.history[0].parts[0].as_text(), Some("hello"));
    // Announced, as every final state is: a subscription ends on it without reading the store.
    assert_eq!(
        *heard.0.lock().unwrap(),
        [("t1".to_owned(), "TASK_STATE_FAILED")]
    );
    assert_eq!(
        agent.fail_interrupted_tasks(None).await.unwrap(),
        0,
        "once only"
    );
    assert_eq!(heard.0.lock().unwrap().len(), 1, "announced once");
}

/// Records what the agent publishes.
#[derive(Debug, Default)]
struct Heard(std::sync::Mutex<Vec<(String, &'static str)>>);

impl TaskEvents for Heard {
    fn listening(&self) -> bool {
        true
    }
    fn publish(&self, event: TaskEvent) {
        self.0
            .lock()
            .unwrap()
            .push((event.task_id.to_string(), event.state.as_str()));
    }
    fn subscribe(
        &self,
        _: &crate::store::PeerId,
        _: &str,
    ) -> crate::shared::events::TaskSubscription {
        unreachable!("the agent only publishes")
    }
}

/// Says one other instance is alive.
#[derive(Debug)]
struct OneOtherLive;

#[async_trait::async_trait]
impl TaskOwnership for OneOtherLive {
    fn instance(&self) -> &str {
        "ins_me"
    }
    async fn is_live(&self, instance: &str) -> bool {
        matches!(instance, "ins_me" | "ins_live")
    }
}

/// The clock the tests' agent reads: stopped at one instant.
fn clock() -> Arc<dyn Clock> {
    Arc::new(crate::clock::ManualClock::new(crate::clock::from_millis(
        1_800_000_000_000,
    )))
}

async fn agent_over(store: &crate::store::Store, shared: SharedState) -> Agent {
    let clock = clock();
    let budgets = Arc::new(Budgets::new(
        store.usage(),
        clock.clone(),
        crate::admin::budget::BudgetDefaults {
            tokens_per_day: 1_000_000,
            tokens_per_month: None,
        },
        Duration::from_secs(2),
    ));
    Agent::builder(
        store.tasks(),
        Arc::new(crate::backend::echo::Echo),
        budgets,
        Arc::new(Metrics::default()),
        clock,
        AgentSettings {
            instructions: String::new(),
            task_retention: Duration::from_secs(3600),
            context_messages: 20,
            max_text_bytes: 1000,
            refuse_unread_parts: false,
            backend_timeout: Duration::from_secs(1),
            non_blocking: false,
            cancel_running: false,
            streaming: false,
            subscriptions: false,
            longest_stream: Duration::from_secs(60),
            streams_per_peer: 8,
        },
    )
    .with_shared_state(shared)
    .build()
}

#[tokio::test]
async fn a_task_is_heard_working_then_completed_once_each_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(dir.path()).await.unwrap();
    let heard = Arc::new(Heard::default());
    let shared = SharedState {
        events: heard.clone(),
        ..SharedState::default()
    };
    let agent = Arc::new(agent_over(&store, shared).await);
    let mut change = store.accounts().begin_change().await.unwrap();
    let owner = crate::store::AdminRecord {
        id: "adm_1".into(),
        name: "owner".into(),
        status: crate::store::AdminStatus::Active,
        has_password: false,
        model_allowed: true,
        tokens_per_day: None,
        tokens_per_month: None,
        created_at: at(1),
        auditor: false,
    };
    change.insert_admin(&owner, None).await.unwrap();
    change.commit().await.unwrap();
    let peer = AuthenticatedPeer::for_tests("peer_1", "adm_1");
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"hi"}]}}}"#;
    let caller = crate::a2a::service::Caller {
        peer,
        client: None,
        admission: None,
        note: None,
        protocol: Default::default(),
        trace: None,
        call: None,
    };
    let pipeline = crate::a2a::pipeline::Pipeline::new(Arc::new(agent.clone()));
    let (_, answer) = crate::a2a::jsonrpc_binding::handle(
        &pipeline,
        caller,
        crate::a2a::jsonrpc_binding::Body {
            bytes: body,
            json: true,
        },
    )
    .await;
    let answer: serde_json::Value = serde_json::from_str(&answer.body().unwrap()).unwrap();
    let task_id = answer["result"]["task"]["id"].as_str().unwrap().to_owned();
    let heard = heard.0.lock().unwrap().clone();
    assert_eq!(
        heard,
        [
            (task_id.clone(), "TASK_STATE_WORKING"),
            (task_id.clone(), "TASK_STATE_COMPLETED")
        ]
    );
    let stored = store
        .tasks()
        .find_task(
            &"peer_1".into(),
            &task_id.as_str().into(),
            at(1_800_000_000_000),
        )
        .await
        .unwrap()
        .unwrap();
    assert!(stored.contains("TASK_STATE_COMPLETED"));
}

#[tokio::test]
async fn the_sweep_fails_leftovers_of_gone_instances_but_not_a_live_ones_turns() {
    let dir = tempfile::tempdir().unwrap();
    let store = crate::store::Store::open(dir.path()).await.unwrap();
    let shared = SharedState {
        ownership: Arc::new(OneOtherLive),
        ..SharedState::default()
    };
    let agent = agent_over(&store, shared).await;
    for (task, instance) in [
        ("t_gone", Some("ins_gone")),
        ("t_live", Some("ins_live")),
        ("t_old", None),
    ] {
        let working = new_task(
            &task.into(),
            &"c1".into(),
            &"m1".into(),
            vec![crate::protocol::types::Part::text("hello")],
            TaskState::Working,
            vec![a2a::Part::text(working_text("model"))],
            at(1),
        );
        store
            .tasks()
            .save_exchange(Exchange {
                task_id: task.into(),
                peer_id: "p1".into(),
                context_id: "c1".into(),
                state: TaskState::Working,
                task_json: serde_json::to_string(&working).unwrap(),
                now: at(1),
                expires_at: at(i64::MAX),
                messages: Vec::new(),
                usage: None,
                audit: None,
                instance: instance.map(Arc::from),
                notify: false,
                push_config: None,
                upstream_task_id: None,
                receipt: None,
                call_trace: None,
                sealing: None,
            })
            .await
            .unwrap();
    }
    assert_eq!(agent.fail_interrupted_tasks(None).await.unwrap(), 2);
    let left: Vec<String> = store
        .tasks()
        .working_tasks(None)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id.to_string())
        .collect();
    assert_eq!(
        left,
        ["t_live"],
        "another live instance is still answering it"
    );
}
