//! Every error an A2A operation answers with, and the one table of its forms in each binding:
//! the JSON-RPC code, the HTTP+JSON status, the gRPC status code and the `google.rpc.ErrorInfo`
//! reason. No other file writes one of these mappings; the bindings ask this one.

use serde_json::{Value, json};

/// Every error an A2A operation answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum A2aError {
    /// `-32700`: not JSON, or not UTF-8.
    Parse,
    /// `-32600`: not a single JSON-RPC 2.0 request object.
    InvalidRequest(&'static str),
    /// `-32601`
    MethodNotFound,
    /// `-32602`: the params are wrong; names the field.
    InvalidParams {
        /// The offending field, dotted from `params`.
        field: String,
        /// What is wrong with it.
        description: String,
    },
    /// `-32603`: something failed inside peergate; the detail is only in the log, under this id.
    Internal {
        /// Correlates the answer with the log line.
        request_id: String,
    },
    /// `-32603` too, but said: the store cannot record the task, so the model was not asked.
    StoreUnavailable {
        /// Correlates the answer with the log line.
        request_id: String,
    },
    /// `-32001`: no such task for this caller.
    TaskNotFound,
    /// `-32002`: says why (finished, or not cancelable here).
    TaskNotCancelable(&'static str),
    /// `-32003`: push notifications are not offered.
    PushNotificationNotSupported,
    /// `-32001` too: the caller's task has no push-notification config with that id.
    PushConfigNotFound,
    /// `-32004`
    UnsupportedOperation(&'static str),
    /// `-32005`
    ContentTypeNotSupported(std::borrow::Cow<'static, str>),
    /// `-32008`: a required extension was not activated.
    ExtensionSupportRequired {
        /// The required URIs the request did not list.
        missing: Vec<String>,
    },
    /// `-32009`: the requested protocol version is not served here.
    VersionNotSupported {
        /// What the request asked for (`""` when it named none).
        requested: String,
    },
    /// `-32000` (implementation-defined): another message of the same context is still being
    /// answered and did not finish in time.
    ContextBusy,
    /// `-32000` (implementation-defined): the content guard refused the message; names the
    /// rule (`<pack>/<rule>`), never what it matched.
    ContentDenied {
        /// The rule that denied it.
        rule: String,
    },
    /// The content guard could not inspect the message, and its failure mode is closed.
    ContentUninspected,
    /// A rate limit refused the request after it reached the service (its shared count was
    /// asked with the operation's own checks). The guard layer in front answers HTTP 429 with
    /// `Retry-After` in its place; this form is for a caller without that layer.
    RateLimited {
        /// Whole seconds until a retry passes.
        retry_after_seconds: u64,
    },
}

impl A2aError {
    /// The one table of A2A errors: each binding's form of each error. The HTTP+JSON body's
    /// `status` name is the gRPC code's, as `google.rpc.Status` has it.
    fn entry(&self) -> Entry {
        use GrpcCode::*;
        let (code, reason, http, grpc) = match self {
            Self::Parse => (-32700, "JSON_PARSE", 400, InvalidArgument),
            Self::InvalidRequest(_) => (-32600, "INVALID_REQUEST", 400, InvalidArgument),
            // Only a JSON-RPC body can name a method there is not; the other bindings' routers
            // answer an unknown route themselves.
            Self::MethodNotFound => (-32601, "METHOD_NOT_FOUND", 404, NotFound),
            Self::InvalidParams { .. } => (-32602, "INVALID_PARAMS", 400, InvalidArgument),
            Self::Internal { .. } => (-32603, "INTERNAL", 500, Internal),
            Self::StoreUnavailable { .. } => (-32603, "STORE_UNAVAILABLE", 500, Internal),
            Self::TaskNotFound => (-32001, "TASK_NOT_FOUND", 404, NotFound),
            // The specification has no reason of its own for a missing config: the SDKs map
            // TASK_NOT_FOUND back to their task-not-found error, and an unknown reason to none.
            Self::PushConfigNotFound => (-32001, "TASK_NOT_FOUND", 404, NotFound),
            Self::TaskNotCancelable(_) => (-32002, "TASK_NOT_CANCELABLE", 400, FailedPrecondition),
            Self::PushNotificationNotSupported => (
                -32003,
                "PUSH_NOTIFICATION_NOT_SUPPORTED",
                400,
                FailedPrecondition,
            ),
            Self::UnsupportedOperation(_) => {
                (-32004, "UNSUPPORTED_OPERATION", 400, FailedPrecondition)
            }
            Self::ContentTypeNotSupported(_) => {
                (-32005, "CONTENT_TYPE_NOT_SUPPORTED", 400, InvalidArgument)
            }
            Self::ExtensionSupportRequired { .. } => (
                -32008,
                "EXTENSION_SUPPORT_REQUIRED",
                400,
                FailedPrecondition,
            ),
            Self::VersionNotSupported { .. } => {
                (-32009, "VERSION_NOT_SUPPORTED", 400, FailedPrecondition)
            }
            // Another message of the context is still being answered: retry later.
            Self::ContextBusy => (-32000, "CONTEXT_BUSY", 409, Aborted),
            Self::RateLimited { .. } => (-32000, "RATE_LIMITED", 429, ResourceExhausted),
            Self::ContentDenied { .. } => (-32000, "CONTENT_DENIED", 400, InvalidArgument),
            Self::ContentUninspected => (-32000, "CONTENT_UNINSPECTED", 503, Unavailable),
        };
        Entry {
            code,
            reason,
            http,
            grpc,
        }
    }

    /// An internal failure: logs `detail` under a new request id, which the answer names (and
    /// nothing else of it), as the guard's `Refusal::internal` does for its refusals.
    pub fn internal(detail: &dyn std::fmt::Display, context: &'static str) -> Self {
        let request_id = crate::protocol::request_id::RequestId::current_or_new();
        tracing::error!(request_id = %request_id, error = %detail, "{context}");
        Self::Internal { request_id }
    }

    /// The JSON-RPC error code.
    pub fn code(&self) -> i64 {
        self.entry().code
    }

    /// The `google.rpc.ErrorInfo` reason.
    pub fn reason(&self) -> &'static str {
        self.entry().reason
    }

    /// The HTTP+JSON binding's status.
    pub fn http_status(&self) -> u16 {
        self.entry().http
    }

    /// The gRPC binding's status code.
    pub fn grpc_code(&self) -> GrpcCode {
        self.entry().grpc
    }

    /// The `ErrorInfo` domain: A2A's own errors (-32001 and below) belong to the protocol's;
    /// the others are JSON-RPC's or peergate's.
    pub fn domain(&self) -> &'static str {
        if (-32099..=-32001).contains(&self.code()) {
            "a2a-protocol.org"
        } else {
            "peergate"
        }
    }

    /// What the error says to the caller; never a secret, a path or an upstream's words.
    pub fn message(&self) -> String {
        match self {
            Self::Parse => "Invalid JSON payload: the body must be UTF-8 JSON".to_owned(),
            Self::InvalidRequest(why) => format!("Request payload validation error: {why}"),
            Self::MethodNotFound => "Method not found".to_owned(),
            Self::InvalidParams { field, description } => {
                format!("Invalid parameters: {field}: {description}")
            }
            Self::Internal { .. } => "Internal error".to_owned(),
            Self::StoreUnavailable { .. } => {
                "Internal error: the gateway cannot store this message right now, so the model was not asked; retry later".to_owned()
            }
            Self::TaskNotFound => "Task not found".to_owned(),
            Self::PushConfigNotFound => {
                "Push notification config not found for this task".to_owned()
            }
            Self::TaskNotCancelable(why) => format!("Task cannot be canceled: {why}"),
            Self::PushNotificationNotSupported => {
                "Push notifications are not supported by this agent (capabilities.pushNotifications is false)".to_owned()
            }
            Self::UnsupportedOperation(why) => format!("Unsupported operation: {why}"),
            Self::ContentTypeNotSupported(why) => format!("Content type not supported: {why}"),
            Self::ExtensionSupportRequired { missing } => format!(
                "Extension support required: activate {} with the A2A-Extensions header",
                missing.join(", ")
            ),
            Self::VersionNotSupported { requested } if requested.is_empty() => {
                "Version not supported: send A2A-Version: 1.0".to_owned()
            }
            Self::VersionNotSupported { .. } => {
                "Version not supported: this agent speaks A2A 1.x; send A2A-Version: 1.0".to_owned()
            }
            Self::ContextBusy => {
                "Another message in this contextId is still being answered; retry after it completes".to_owned()
            }
            Self::RateLimited {
                retry_after_seconds,
            } => format!("Too many requests: retry after {retry_after_seconds} s"),
            Self::ContentDenied { rule } => {
                format!("The message was refused by the gateway's content rules (rule {rule})")
            }
            Self::ContentUninspected => {
                "The message could not be inspected by the gateway's content rules, so it was not passed on; retry later".to_owned()
            }
        }
    }

    /// The error's `details` (`data` in JSON-RPC): an `ErrorInfo`, plus a `BadRequest` naming
    /// the field for invalid params.
    pub fn details(&self) -> Value {
        let mut metadata = serde_json::Map::new();
        match self {
            Self::Internal { request_id } | Self::StoreUnavailable { request_id } => {
                metadata.insert("requestId".to_owned(), Value::String(request_id.clone()));
            }
            Self::ExtensionSupportRequired { missing } => {
                metadata.insert(
                    "missingExtensions".to_owned(),
                    Value::String(missing.join(",")),
                );
            }
            Self::VersionNotSupported { .. } => {
                metadata.insert(
                    "supportedVersions".to_owned(),
                    Value::String("1.0".to_owned()),
                );
            }
            Self::ContentDenied { rule } => {
                metadata.insert("rule".to_owned(), Value::String(rule.clone()));
            }
            _ => {}
        }
        let mut details = vec![json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.reason(),
            "domain": self.domain(),
            "metadata": metadata,
        })];
        if let Self::InvalidParams { field, description } = self {
            details.push(json!({
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": field, "description": description}],
            }));
        }
        Value::Array(details)
    }

    /// The JSON-RPC `error` member: code, message and `data`.
    pub fn to_json(&self) -> Value {
        json!({"code": self.code(), "message": self.message(), "data": self.details()})
    }

    /// The HTTP+JSON binding's body, a `google.rpc.Status`.
    pub fn http_body(&self) -> Value {
        let status = self.http_status();
        json!({"error": {
            "code": status,
            "status": self.grpc_code().name(),
            "message": self.message(),
            "details": self.details(),
        }})
    }
}

/// One row of the table.
struct Entry {
    code: i64,
    reason: &'static str,
    http: u16,
    grpc: GrpcCode,
}

/// The gRPC status codes A2A's errors and peergate's refusals use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GrpcCode {
    /// 3
    InvalidArgument,
    /// 4
    DeadlineExceeded,
    /// 5
    NotFound,
    /// 7
    PermissionDenied,
    /// 8
    ResourceExhausted,
    /// 9
    FailedPrecondition,
    /// 10
    Aborted,
    /// 12
    Unimplemented,
    /// 13
    Internal,
    /// 14
    Unavailable,
    /// 16
    Unauthenticated,
}

impl GrpcCode {
    /// The code's number (`grpc-status`).
    pub fn number(self) -> u8 {
        match self {
            Self::InvalidArgument => 3,
            Self::DeadlineExceeded => 4,
            Self::NotFound => 5,
            Self::PermissionDenied => 7,
            Self::ResourceExhausted => 8,
            Self::FailedPrecondition => 9,
            Self::Aborted => 10,
            Self::Unimplemented => 12,
            Self::Internal => 13,
            Self::Unavailable => 14,
            Self::Unauthenticated => 16,
        }
    }

    /// The code a canonical name names.
    pub fn from_name(name: &str) -> Option<Self> {
        [
            Self::InvalidArgument,
            Self::DeadlineExceeded,
            Self::NotFound,
            Self::PermissionDenied,
            Self::ResourceExhausted,
            Self::FailedPrecondition,
            Self::Aborted,
            Self::Unimplemented,
            Self::Internal,
            Self::Unavailable,
            Self::Unauthenticated,
        ]
        .into_iter()
        .find(|code| code.name() == name)
    }

    /// The code of a refusal the guard in front of every binding answered with HTTP `status`:
    /// who the caller is (401), what it may do (403), how often (429), how large (413), how long
    /// (408), and a route there is not (404, 405).
    pub fn for_http_refusal(status: u16) -> Self {
        match status {
            400 => Self::InvalidArgument,
            401 => Self::Unauthenticated,
            403 => Self::PermissionDenied,
            404 | 405 => Self::Unimplemented,
            408 => Self::DeadlineExceeded,
            413 | 429 => Self::ResourceExhausted,
            503 => Self::Unavailable,
            _ => Self::Internal,
        }
    }

    /// The code's canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Self::NotFound => "NOT_FOUND",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Self::FailedPrecondition => "FAILED_PRECONDITION",
            Self::Aborted => "ABORTED",
            Self::Unimplemented => "UNIMPLEMENTED",
            Self::Internal => "INTERNAL",
            Self::Unavailable => "UNAVAILABLE",
            Self::Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limits_refusal_reaching_a_binding_is_a_429_that_says_when_to_retry() {
        let refused = A2aError::RateLimited {
            retry_after_seconds: 7,
        };
        assert_eq!(refused.http_status(), 429);
        assert_eq!(refused.grpc_code(), GrpcCode::ResourceExhausted);
        assert_eq!(refused.reason(), "RATE_LIMITED");
        assert_eq!(refused.message(), "Too many requests: retry after 7 s");
    }
}
