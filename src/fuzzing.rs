//! Entry points shared by the `fuzz/` targets and the stable test that replays their corpora,
//! so both hold the code to the same properties.

use crate::jsonrpc::{self, Method};

/// Feeds arbitrary bytes to the JSON-RPC envelope parser and checks what it promises: it
/// never panics, a refusal carries only an envelope-level code, and an accepted request names
/// a known method and, when the id was readable, echoes it with its JSON type.
pub fn jsonrpc_envelope(data: &[u8]) {
    match jsonrpc::parse_request(data) {
        Ok(request) => {
            assert!(matches!(
                request.method,
                Method::SendMessage
                    | Method::GetTask
                    | Method::CancelTask
                    | Method::GetExtendedAgentCard
                    | Method::Unsupported
            ));
            let id = request.id.to_json();
            assert!(id.is_null() || id.is_string() || id.is_i64());
            // Params that parsed as raw JSON must parse again as JSON.
            if let Some(params) = &request.params {
                assert!(serde_json::from_str::<serde_json::Value>(params.get()).is_ok());
            }
            let null = serde_json::value::RawValue::from_string("null".to_owned()).unwrap();
            let response: serde_json::Value =
                serde_json::from_str(&jsonrpc::success(&request.id, &null)).unwrap();
            assert_eq!(response["id"], id);
        }
        Err(failure) => {
            assert!(matches!(failure.error.code(), -32700 | -32600 | -32601));
            let response: serde_json::Value =
                serde_json::from_str(&jsonrpc::failure(&failure.id, &failure.error)).unwrap();
            assert_eq!(response["jsonrpc"], "2.0");
        }
    }
}
