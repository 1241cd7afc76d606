//! The gRPC binding's messages: A2A 1.0's `a2a.proto` (and gRPC health, `google.rpc.Status`),
//! compiled when peergate is built and read here by reflection.
//!
//! The binding carries the same objects as the other two: a protobuf message is read into its
//! ProtoJSON form, which the typed requests already read, and a typed answer's ProtoJSON is
//! written back as the protobuf message. So the three bindings share one set of types and one
//! set of checks; the only gRPC-specific code is the envelope.

use super::error::{A2aError, GrpcCode};
use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::sync::OnceLock;

/// The A2A service's full name, the first segment of its methods' paths.
pub const A2A_SERVICE: &str = "lf.a2a.v1.A2AService";

/// The health service's full name.
pub const HEALTH_SERVICE: &str = "grpc.health.v1.Health";

static DESCRIPTORS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin"));

/// Every message the binding reads or writes.
fn pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| {
        // Built from `proto/` by build.rs: a descriptor set that does not decode is a broken
        // build, not a run-time condition.
        DescriptorPool::decode(DESCRIPTORS).expect("the compiled descriptor set decodes")
    })
}

/// The descriptor of message `name` (its full name), if the binding has it.
pub fn descriptor(name: &str) -> Option<MessageDescriptor> {
    pool().get_message_by_name(name)
}

/// A protobuf message as ProtoJSON text: what a typed request reads (written straight to text,
/// with no JSON tree between).
pub fn read(message: &DynamicMessage) -> Result<Box<RawValue>, A2aError> {
    serde_json::value::to_raw_value(message).map_err(|_| A2aError::InvalidParams {
        field: "request".to_owned(),
        description: "cannot be read as its ProtoJSON form".to_owned(),
    })
}

/// A typed answer's ProtoJSON text as message `descriptor`. Members the message does not have
/// are left out: an answer carries what the protocol's message can hold.
pub fn write(descriptor: &MessageDescriptor, json: &str) -> Result<DynamicMessage, A2aError> {
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let mut text = serde_json::Deserializer::from_str(json);
    DynamicMessage::deserialize_with_options(descriptor.clone(), &mut text, &options)
        .and_then(|message| text.end().map(|()| message))
        .map_err(|e| {
            internal(format!(
                "an answer does not fit {}: {e}",
                descriptor.full_name()
            ))
        })
}

/// A `google.rpc.Status` with `code`, `message` and `details` (ProtoJSON `Any` objects, as the
/// other bindings write them), encoded for `grpc-status-details-bin`. Details of a type the
/// descriptor set does not hold are left out.
pub fn status_details(code: GrpcCode, message: &str, details: &Value) -> Vec<u8> {
    let known: Vec<Value> = details
        .as_array()
        .into_iter()
        .flatten()
        .filter(|detail| {
            detail["@type"]
                .as_str()
                .and_then(|url| url.rsplit('/').next())
                .is_some_and(|name| pool().get_message_by_name(name).is_some())
        })
        .cloned()
        .collect();
    let status = json!({"code": code.number(), "message": message, "details": known});
    descriptor("google.rpc.Status")
        .and_then(|status_type| write(&status_type, &status.to_string()).ok())
        .map(|status| prost::Message::encode_to_vec(&status))
        .unwrap_or_default()
}

/// A `google.rpc.RetryInfo` detail asking to retry after `seconds`.
pub fn retry_info(seconds: u64) -> Value {
    json!({
        "@type": "type.googleapis.com/google.rpc.RetryInfo",
        "retryDelay": format!("{seconds}s"),
    })
}

fn internal(detail: String) -> A2aError {
    A2aError::internal(&detail, "a gRPC message could not be converted")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(name: &str, json: &Value) -> Value {
        let message = write(&descriptor(name).unwrap(), &json.to_string()).unwrap();
        let bytes = prost::Message::encode_to_vec(&message);
        let decoded = DynamicMessage::decode(descriptor(name).unwrap(), bytes.as_slice()).unwrap();
        serde_json::from_str(read(&decoded).unwrap().get()).unwrap()
    }

    #[test]
    fn a_message_reads_as_the_protojson_the_other_bindings_send() {
        let json = json!({"message": {
            "messageId": "m1",
            "role": "ROLE_USER",
            "parts": [{"text": "hi"}, {"data": {"n": 1.0}}],
        }, "configuration": {"historyLength": 2}});
        assert_eq!(round_trip("lf.a2a.v1.SendMessageRequest", &json), json);
    }

    #[test]
    fn an_answer_keeps_what_its_message_holds_and_drops_the_rest() {
        let task = json!({
            "id": "t1",
            "contextId": "c1",
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": "2026-12-01T10:00:00.123Z"},
            "notInTheProtocol": true,
        });
        let read_back = round_trip("lf.a2a.v1.Task", &task);
        assert_eq!(read_back["status"]["state"], "TASK_STATE_COMPLETED");
        assert_eq!(read_back["status"]["timestamp"], "2026-12-01T10:00:00.123Z");
        assert!(read_back.get("notInTheProtocol").is_none());
    }

    #[test]
    fn a_status_carries_the_error_info_and_a_retry_delay() {
        let error = A2aError::TaskNotFound;
        let mut details = error.details();
        details.as_array_mut().unwrap().push(retry_info(7));
        let bytes = status_details(error.grpc_code(), &error.message(), &details);
        let status_type = descriptor("google.rpc.Status").unwrap();
        let status = read(&DynamicMessage::decode(status_type, bytes.as_slice()).unwrap()).unwrap();
        let status: Value = serde_json::from_str(status.get()).unwrap();
        assert_eq!(status["code"], 5);
        assert_eq!(status["details"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(status["details"][0]["domain"], "a2a-protocol.org");
        assert_eq!(status["details"][1]["retryDelay"], "7s");
    }
}
