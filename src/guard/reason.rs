//! Why the gateway refused a request, as a fixed label the metrics and the access log count.

/// Why the gateway refused a request, for the metrics and the access log: a fixed label, never a
/// name or a value from the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalReason {
    /// Missing or wrong credentials at the door.
    Unauthenticated,
    /// The per-IP limit.
    PerIp,
    /// The failed-authentication budget.
    FailedAuth,
    /// The per-peer limit.
    PerPeer,
    /// An `A2A-Version` the door does not speak.
    VersionNotSupported,
    /// A required extension not activated.
    ExtensionRequired,
    /// A body over the limit.
    BodyTooLarge,
    /// Missing or wrong credentials on the admin API.
    AdminUnauthenticated,
    /// Every password slot busy and the queue for them full.
    PasswordChecksBusy,
    /// A peer at its cap of open streams.
    TooManyStreams,
    /// A browser sending for another site's page (the admin API).
    CrossSiteRequest,
    /// A token without the scope its operation needs.
    InsufficientScope,
    /// An HTTP/2 connection whose client has not taken the answers it holds.
    NotReading,
    /// A peer calling an operation its administrator did not give it.
    OperationNotAllowed,
    /// A call the authorization policies do not permit.
    PolicyDenied,
    /// A message the content guard's rules (or its outside inspector) denied.
    ContentDenied,
    /// A message the content guard could not inspect, under the closed failure mode.
    ContentUninspected,
}

impl RefusalReason {
    /// Every reason, in declaration order: `ALL[r as usize] == r`.
    pub const ALL: [Self; 17] = [
        Self::Unauthenticated,
        Self::PerIp,
        Self::FailedAuth,
        Self::PerPeer,
        Self::VersionNotSupported,
        Self::ExtensionRequired,
        Self::BodyTooLarge,
        Self::AdminUnauthenticated,
        Self::PasswordChecksBusy,
        Self::TooManyStreams,
        Self::CrossSiteRequest,
        Self::InsufficientScope,
        Self::NotReading,
        Self::OperationNotAllowed,
        Self::PolicyDenied,
        Self::ContentDenied,
        Self::ContentUninspected,
    ];

    /// The label metrics and the access log show.
    pub fn label(self) -> &'static str {
        match self {
            Self::Unauthenticated => "unauthenticated",
            Self::PerIp => "per_ip",
            Self::FailedAuth => "failed_auth",
            Self::PerPeer => "per_peer",
            Self::VersionNotSupported => "version_not_supported",
            Self::ExtensionRequired => "extension_required",
            Self::BodyTooLarge => "body_too_large",
            Self::AdminUnauthenticated => "admin_unauthenticated",
            Self::PasswordChecksBusy => "password_checks_busy",
            Self::TooManyStreams => "too_many_streams",
            Self::CrossSiteRequest => "cross_site_request",
            Self::InsufficientScope => "insufficient_scope",
            Self::NotReading => "not_reading",
            Self::OperationNotAllowed => "operation_not_allowed",
            Self::PolicyDenied => "policy_denied",
            Self::ContentDenied => "content_denied",
            Self::ContentUninspected => "content_uninspected",
        }
    }
}

// A reason added after the last one in `ALL` fails to compile here until `ALL` lists it.
const _: () = assert!(RefusalReason::ContentUninspected as usize + 1 == RefusalReason::ALL.len());
