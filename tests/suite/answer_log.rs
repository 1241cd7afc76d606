//! The answer log over real HTTP: every receipt lands in an RFC 6962 tree whose checkpoints are
//! signed with the log key the card names, within the delay the receipt promises; its proofs,
//! tiles and entry bundles verify as C2SP's formats define them; and a tampered store is caught
//! by the integrator (which refuses to sign over it) and by `peergate log audit`.

use crate::common::*;
use peergate::jose::receipt::EXTENSION;
use peergate::tlog::note::{Checkpoint, NoteVerifier, TlogProof};
use peergate::tlog::{self, proof, tile};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};

fn policy() -> peergate::config::Policy {
    PolicyEdit::default()
        .set("receipts.mode", "always")
        .policy()
}

/// The log as the card declares it: its parameters, and its verifier key.
async fn declared_log(gw: &TestGateway) -> (Value, NoteVerifier) {
    let card = gw.card().await;
    let extension = card["capabilities"]["extensions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["uri"] == EXTENSION)
        .unwrap_or_else(|| panic!("no receipts in {card}"))
        .clone();
    let log = extension["params"]["log"].clone();
    let verifier = NoteVerifier::parse(log["vkey"].as_str().unwrap()).unwrap();
    (log, verifier)
}

/// A SendMessage's finished task, and its receipt.
async fn answered(gw: &TestGateway, token: &str, id: &str) -> String {
    let request = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": id}]}}});
    let response = rpc(&gw.door, token, request).await;
    task_of(&response)["metadata"][EXTENSION]
        .as_str()
        .unwrap()
        .to_owned()
}

/// GETs `url`: the status and the body.
async fn fetch(url: &str) -> (u16, Vec<u8>) {
    let response = reqwest::get(url).await.unwrap();
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap().to_vec())
}

/// The receipt's `tlog-proof`, once the integrator has appended it (it promises 10 s).
async fn proof_of(base: &str, receipt: &str) -> TlogProof {
    let jti = jws_claims(receipt)["jti"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = fetch(&format!("{base}proof/{jti}")).await;
        if status == 200 {
            return TlogProof::parse(std::str::from_utf8(&body).unwrap()).unwrap();
        }
        assert_eq!(status, 404, "{}", String::from_utf8_lossy(&body));
        assert!(Instant::now() < deadline, "no proof within 30 s");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The leaf hash of a receipt: the log's entry is SHA-256 of the receipt.
fn leaf_of(receipt: &str) -> tlog::Hash {
    tlog::leaf_hash(&Sha256::digest(receipt.as_bytes()))
}

/// Checks a proof as a partner would: the checkpoint signed by the card's log key, the
/// receipt's leaf included in it. The checkpoint.
fn verified(proof: &TlogProof, receipt: &str, log: &NoteVerifier) -> Checkpoint {
    let checkpoint = Checkpoint::open(&proof.checkpoint, log).unwrap();
    proof::verify_inclusion(
        proof.index,
        checkpoint.size,
        &leaf_of(receipt),
        &proof.hashes,
        &checkpoint.root,
    )
    .unwrap();
    checkpoint
}

#[tokio::test]
async fn every_receipt_is_proven_in_a_signed_log_whose_tiles_and_checkpoints_agree() {
    let gw = TestGateway::start_with(policy()).await;
    let token = gw.add_peer("alice");
    let (declared, log) = declared_log(&gw).await;
    let origin = format!("{}/a2a-receipts", gw.addr);
    assert_eq!(declared["origin"], origin.as_str());
    assert_eq!(declared["mmd"], 10);
    let base = declared["url"].as_str().unwrap().to_owned();
    assert_eq!(base, format!("http://{}/a2a-receipts/", gw.addr));

    let mut receipts = Vec::new();
    for i in 0..3 {
        let receipt = answered(&gw, &token, &format!("m-log-{i}")).await;
        assert_eq!(
            jws_claims(&receipt)["log"],
            json!({"origin": origin, "mmd": 10})
        );
        receipts.push(receipt);
    }
    let mut indices = Vec::new();
    for receipt in &receipts {
        let proof = proof_of(&base, receipt).await;
        verified(&proof, receipt, &log);
        indices.push(proof.index);
        // Another receipt's leaf does not verify at that index.
        let other = receipts.iter().find(|r| *r != receipt).unwrap();
        let checkpoint = Checkpoint::open(&proof.checkpoint, &log).unwrap();
        assert!(
            proof::verify_inclusion(
                proof.index,
                checkpoint.size,
                &leaf_of(other),
                &proof.hashes,
                &checkpoint.root
            )
            .is_err()
        );
    }
    indices.sort_unstable();
    assert_eq!(indices, vec![0, 1, 2], "dense indices from 0");

    // The tiles: the leaves and entries of the checkpoint, as tlog-tiles serves them.
    let (status, note) = fetch(&format!("{base}checkpoint")).await;
    assert_eq!(status, 200);
    let first = Checkpoint::open(std::str::from_utf8(&note).unwrap(), &log).unwrap();
    let width = first.size;
    let (status, leaves) = fetch(&format!("{base}{}", tile::path("0", 0, width))).await;
    assert_eq!(status, 200);
    let leaves: Vec<tlog::Hash> = leaves.chunks(32).map(|c| c.try_into().unwrap()).collect();
    assert_eq!(
        tlog::tree_hash(&leaves),
        first.root,
        "the level-0 tile hashes to the root"
    );
    let (_, bundle) = fetch(&format!("{base}{}", tile::path("entries", 0, width))).await;
    let entries = tile::unbundle(&bundle).unwrap();
    for (entry, leaf) in entries.iter().zip(&leaves) {
        assert_eq!(tlog::leaf_hash(entry), *leaf);
    }
    let logged: Vec<Vec<u8>> = receipts
        .iter()
        .map(|r| Sha256::digest(r.as_bytes()).to_vec())
        .collect();
    for entry in &entries {
        assert!(
            logged.contains(&entry.to_vec()),
            "an entry is SHA-256 of a receipt"
        );
    }
    // Past the tree, and malformed: not found.
    for path in [
        tile::path("0", 0, 256),
        tile::path("0", 0, width + 1),
        "tile/0/1".into(),
    ] {
        assert_eq!(fetch(&format!("{base}{path}")).await.0, 404, "{path}");
    }
    assert_eq!(fetch(&format!("{base}proof/no-such-receipt")).await.0, 404);

    // The log grows append-only: the new checkpoint is consistent with the first.
    let later = answered(&gw, &token, "m-log-3").await;
    let grown = verified(&proof_of(&base, &later).await, &later, &log);
    assert!(grown.size > first.size);
    let (_, leaves) = fetch(&format!("{base}{}", tile::path("0", 0, grown.size))).await;
    let leaves: Vec<tlog::Hash> = leaves.chunks(32).map(|c| c.try_into().unwrap()).collect();
    let hashes: Vec<tlog::Hash> = proof::consistency_ranges(first.size, grown.size)
        .unwrap()
        .into_iter()
        .map(|(start, end)| tlog::tree_hash(&leaves[start as usize..end as usize]))
        .collect();
    proof::verify_consistency(
        (first.size, &first.root),
        (grown.size, &grown.root),
        &hashes,
    )
    .unwrap();
    gw.stop().await;
}

#[tokio::test]
async fn the_command_line_checks_a_receipts_place_in_the_log_and_refuses_a_forked_log() {
    let gw = TestGateway::start_with(policy()).await;
    let token = gw.add_peer("alice");
    let (declared, _) = declared_log(&gw).await;
    let base = declared["url"].as_str().unwrap().to_owned();
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let card = write(
        "card.json",
        &reqwest::get(gw.url("/.well-known/agent-card.json"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    let jwks = write(
        "jwks.json",
        &reqwest::get(gw.url("/.well-known/jwks.json"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    let remembered = dir.path().join("checkpoints");
    let ask = async |id: &str| {
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": {"messageId": id, "role": "ROLE_USER", "parts": [{"text": id}]}}});
        let task = task_of(&rpc(&gw.door, &token, request.clone()).await).clone();
        let receipt = task["metadata"][EXTENSION].as_str().unwrap().to_owned();
        (
            write(&format!("{id}-task.json"), &task.to_string()),
            write(&format!("{id}-request.json"), &request.to_string()),
            receipt,
        )
    };
    let verify = |task: &str, request: &str, proof: &str| {
        let kept = remembered.to_str().unwrap();
        let extra = [
            "--proof",
            proof,
            "--checkpoints",
            kept,
            "--dangerous-allow-http-loopback",
        ];
        verify_receipt((task, request), (&card, &jwks), &extra)
    };
    let (task, request, receipt) = ask("m-cli-log-1").await;
    // Without a proof, the output says where to fetch it.
    let (code, out, err) = verify_receipt((&task, &request), (&card, &jwks), &[]);
    assert_eq!(code, 0, "{out}{err}");
    let jti = jws_claims(&receipt)["jti"].as_str().unwrap().to_owned();
    assert!(
        out.contains(&format!("log: not checked (its proof: {base}proof/{jti}")),
        "{out}"
    );
    proof_of(&base, &receipt).await;
    let url = format!("{base}proof/{jti}");
    let (code, out, err) = verify(&task, &request, &url);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("log: receipt included at index 0 of"), "{out}");
    // The next receipt's checkpoint is proven consistent with the one remembered (from tiles).
    let (task2, request2, receipt2) = ask("m-cli-log-2").await;
    proof_of(&base, &receipt2).await;
    let url2 = format!(
        "{base}proof/{}",
        jws_claims(&receipt2)["jti"].as_str().unwrap()
    );
    let (code, out, err) = verify(&task2, &request2, &url2);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("log: consistent with the remembered checkpoint of 1 entries"),
        "{out}"
    );
    // A proof whose hashes or index were changed does not hold.
    let proof_text = reqwest::get(&url2).await.unwrap().text().await.unwrap();
    let bent = write(
        "bent.tlog-proof",
        &proof_text.replacen("index 1", "index 0", 1),
    );
    let (code, _, err) = verify(&task2, &request2, &bent);
    assert_ne!(code, 0);
    assert!(
        err.contains("log: the receipt is not in the checkpoint"),
        "{err}"
    );
    // A log that shows this partner another history (a checkpoint signed by the log's own key
    // over other entries) is refused, and both checkpoints are kept as evidence.
    let key = peergate::jose::keys::read_ed25519(
        &gw.data
            .path()
            .join(peergate::jose::keys::DEFAULT_LOG_KEY_FILE),
    )
    .unwrap();
    let signer =
        peergate::tlog::note::NoteSigner::new(declared["origin"].as_str().unwrap(), key).unwrap();
    let forked = Checkpoint {
        origin: declared["origin"].as_str().unwrap().to_owned(),
        size: 2,
        root: tlog::tree_hash(&[leaf_of("another"), leaf_of("history")]),
    };
    let kept = std::fs::read_dir(&remembered)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(&kept, signer.sign(&forked.text()).unwrap()).unwrap();
    let (code, _, err) = verify(&task2, &request2, &url2);
    assert_ne!(code, 0);
    assert!(
        err.contains("is not consistent with the one remembered"),
        "{err}"
    );
    let evidence = std::fs::read_dir(&remembered)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("inconsistent")
        })
        .count();
    assert_eq!(evidence, 1, "both checkpoints kept as evidence");
    gw.stop().await;
}

#[tokio::test]
async fn a_tampered_store_is_named_by_the_audit_and_never_signed_over_by_the_integrator() {
    let gw = TestGateway::start_with(policy()).await;
    let token = gw.add_peer("alice");
    let (declared, log) = declared_log(&gw).await;
    let base = declared["url"].as_str().unwrap().to_owned();
    let mut last = String::new();
    for i in 0..4 {
        last = answered(&gw, &token, &format!("m-audit-{i}")).await;
    }
    let checkpoint = verified(&proof_of(&base, &last).await, &last, &log);
    while Checkpoint::open(
        &String::from_utf8(fetch(&format!("{base}checkpoint")).await.1).unwrap(),
        &log,
    )
    .unwrap()
    .size
        < 4
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let door_url = format!("http://{}/a2a/v1", gw.addr);
    let engine = TestStore::from_env();
    let mut args = vec!["log".to_owned(), "audit".to_owned()];
    args.extend(engine.args(gw.data.path()));
    let audit = || cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let (code, out, err) = audit();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("answer log: consistent (4 receipts"), "{out}");
    assert!(checkpoint.size >= 1);
    let kept = gw.stop_keeping_data().await;
    let data = kept.path();

    // A stored receipt changed: the audit names its index.
    engine
        .tamper(
            data,
            "UPDATE receipts SET jws = jws || 'x' WHERE log_index = 2",
        )
        .await;
    let (code, _, err) = audit();
    assert_ne!(code, 0);
    assert!(
        err.contains("from index 2: the stored receipt is not the one its entry commits to"),
        "{err}"
    );
    engine
        .tamper(
            data,
            "UPDATE receipts SET jws = substr(jws, 1, length(jws) - 1) WHERE log_index = 2",
        )
        .await;
    assert_eq!(audit().0, 0, "restored");

    // A stored tree hash changed: the audit names the first leaf under it, and the integrator
    // refuses to sign a new checkpoint over it.
    engine.tamper(data, "UPDATE log_hashes SET hash = (SELECT hash FROM log_hashes WHERE level = 0 AND n = 0) WHERE level = 2 AND n = 0").await;
    let (code, _, err) = audit();
    assert_ne!(code, 0);
    assert!(
        err.contains("from index 0: the stored tree hash at level 2, node 0"),
        "{err}"
    );
    // The integrator checks before it signs a new checkpoint, when a receipt waits.
    engine
        .tamper(
            data,
            "INSERT INTO receipts (jti, peer_id, task_id, jws, entry, created_at) \
             SELECT 'late', peer_id, task_id, jws, entry, created_at + 1 FROM receipts WHERE log_index = 0",
        )
        .await;
    let store = engine.open(data).await;
    let key = peergate::jose::keys::default_log_key(data).unwrap();
    let answer_log =
        peergate::a2a::answer_log::AnswerLog::new(store.log(), &door_url, key).unwrap();
    let now = peergate::clock::Clock::now(&peergate::clock::SystemClock);
    let refused = answer_log.integrate(now).await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("does not hash to its checkpoint"),
        "{refused}"
    );
    store.close().await;
}

#[tokio::test]
async fn a_rotated_log_key_goes_on_from_the_last_checkpoint_and_the_retired_one_stays_named() {
    let keys = tempfile::tempdir().unwrap();
    let old = generated_key(keys.path(), "EdDSA", "log-old");
    let new = generated_key(keys.path(), "EdDSA", "log-new");
    let policy = |current: &str, retired: &[&str]| {
        let retired = toml_edit::Value::from(toml_edit::Array::from_iter(retired.iter().copied()));
        PolicyEdit::default()
            .set("receipts.mode", "always")
            .insert("receipts.log_key_file", current)
            .insert("receipts.retired_log_key_files", retired)
    };
    let gw = TestGateway::start_with(policy(&old, &[]).policy()).await;
    let token = gw.add_peer("alice");
    let (declared, old_log) = declared_log(&gw).await;
    let base = declared["url"].as_str().unwrap().to_owned();
    let first = answered(&gw, &token, "m-rotation-1").await;
    let first_proof = proof_of(&base, &first).await;
    let door_url = format!("http://{}/a2a/v1", gw.addr);
    let peer = jws_claims(&first)["sub"].as_str().unwrap().to_owned();
    let engine = TestStore::from_env();
    let kept = gw.stop_keeping_data().await;
    let data = kept.path();

    // A receipt issued after the rotation, queued as an exchange queues it.
    let store = engine.open(data).await;
    let jws = "header.after-rotation.signature".to_owned();
    let now = peergate::clock::Clock::now(&peergate::clock::SystemClock);
    let exchange = peergate::store::Exchange {
        receipt: Some(peergate::store::IssuedReceipt {
            jti: "after-rotation".into(),
            entry: Sha256::digest(jws.as_bytes()).into(),
            jws,
        }),
        ..bare_exchange(
            ("t-after-rotation", peer.as_str(), "ctx-rotation"),
            peergate::protocol::types::TaskState::Completed,
            now,
        )
    };
    store.tasks().save_exchange(exchange).await.unwrap();
    let read = |path: &str| peergate::jose::keys::read_ed25519(std::path::Path::new(path)).unwrap();
    let answer_log = |retired: &[&str]| {
        let retired: Vec<_> = retired.iter().map(|p| read(p).verifying_key()).collect();
        peergate::a2a::answer_log::AnswerLog::new(store.log(), &door_url, read(&new))
            .unwrap()
            .retiring(&retired)
            .unwrap()
    };
    // The new key alone does not take the old key's checkpoint: it appends nothing.
    assert!(answer_log(&[]).integrate(now).await.is_err());
    // With the old key retired, the log goes on under the new key.
    let rotated = answer_log(&[&old]);
    assert_eq!(rotated.integrate(now).await.unwrap(), 1);
    let params = rotated.card_params();
    assert_eq!(params["retiredVkeys"], json!([declared["vkey"]]));
    let new_log = NoteVerifier::parse(params["vkey"].as_str().unwrap()).unwrap();
    let proof = TlogProof::parse(&rotated.proof("after-rotation").await.unwrap()).unwrap();
    let checkpoint = Checkpoint::open(&proof.checkpoint, &new_log).unwrap();
    assert!(Checkpoint::open(&proof.checkpoint, &old_log).is_err());
    assert_eq!((proof.index, checkpoint.size), (1, 2));
    // A proof from before the rotation still verifies with the key the card keeps naming.
    verified(&first_proof, &first, &old_log);
    // The same store served at another host or port would sign its log under another name:
    // start-up refuses it.
    rotated.check_origin().await.unwrap();
    let elsewhere = peergate::a2a::answer_log::AnswerLog::new(
        store.log(),
        "http://192.0.2.7:9/a2a/v1",
        read(&new),
    )
    .unwrap();
    let refused = elsewhere.check_origin().await.unwrap_err();
    assert!(
        refused.contains("server.public_base_url") && refused.contains("192.0.2.7:9"),
        "{refused}"
    );
    store.close().await;

    // The operator's audit takes the retired key from the policy; without it, the old
    // checkpoints are not the log's.
    let audit = |policy: PolicyEdit| {
        let file = keys.path().join("policy.toml");
        std::fs::write(&file, policy.text()).unwrap();
        let mut args = vec!["log".to_owned(), "audit".to_owned(), "--policy".to_owned()];
        args.push(file.to_str().unwrap().to_owned());
        args.extend(engine.args(data));
        cli(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (code, out, err) = audit(policy(&new, &[&old]));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("answer log: consistent (2 receipts"), "{out}");
    let (code, _, err) = audit(policy(&new, &[]));
    assert_ne!(code, 0);
    assert!(
        err.contains("its checkpoint is not signed by the log key"),
        "{err}"
    );

    // Served with the policy that rotates: the card names the new key and the retired one.
    let rotated_gw = TestGateway::start_with(policy(&new, &[&old]).policy()).await;
    let (declared, log) = declared_log(&rotated_gw).await;
    let origin = declared["origin"].as_str().unwrap();
    let named = |path: &str| NoteVerifier::new(origin, read(path).verifying_key()).unwrap();
    assert_eq!(log, named(&new));
    assert_eq!(declared["retiredVkeys"], json!([named(&old).to_string()]));
    rotated_gw.stop().await;
}
