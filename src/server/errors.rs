//! Where an error becomes an HTTP answer: every error code of the API with its status
//! (SPEC §6, docs/api.md's table), and which code answers each domain error.
//!
//! Domain modules say what went wrong with enums of their own ([`InputError`], [`Refusal`],
//! [`FeedbackError`], [`PromoteError`]); they know nothing of statuses. The server, the batch
//! lines and the command line name an error by the code this module gives it, so the same
//! failure reads the same everywhere.

use std::fmt::Display;

use crate::decide::Refusal;
use crate::http1::Response;
use crate::input::InputError;
use crate::tuning::{FeedbackError, PromoteError};

/// Declares [`ErrorCode`] from one list: each code's variant, doc, status and text are written
/// once, and `ALL` and the table follow from it.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])* $name:ident = ($status:literal, $code:literal),)*) => {
        /// One error the API answers with: its code and its HTTP status, as docs/api.md lists them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum ErrorCode {
            $($(#[doc = $doc])* $name,)*
        }

        impl ErrorCode {
            /// Every code, in docs/api.md's order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name),*];

            /// The HTTP status and the code as the API writes it: the one table of both.
            fn row(self) -> (u16, &'static str) {
                match self {
                    $(ErrorCode::$name => ($status, $code),)*
                }
            }
        }
    };
}

error_codes! {
    /// the body is not valid JSON, or nested too deep
    InvalidJson = (400, "invalid_json"),
    /// the body is JSON but not an object
    NotAnObject = (400, "not_an_object"),
    /// a body or `Content-Length` of the wrong shape
    InvalidBody = (400, "invalid_body"),
    /// not valid HTTP
    BadRequest = (400, "bad_request"),
    /// a header with a value the endpoint does not take
    InvalidHeader = (400, "invalid_header"),
    /// a snapshot id that is not a UUID
    InvalidSnapshotId = (400, "invalid_snapshot_id"),
    /// a query parameter the endpoint does not take or cannot read
    InvalidQuery = (400, "invalid_query"),
    /// a reward the table does not take
    InvalidReward = (400, "invalid_reward"),
    /// the bearer token is missing or wrong
    Unauthorized = (401, "unauthorized"),
    /// no such endpoint on this listener
    NotFound = (404, "not_found"),
    /// no table of that name, or no default table
    UnknownTable = (404, "unknown_table"),
    /// no such snapshot in memory, or no tuned decision with the id
    UnknownSnapshot = (404, "unknown_snapshot"),
    /// the recent decisions were asked while snapshots are off
    SnapshotsOff = (404, "snapshots_off"),
    /// tuning is off or the table is not tuned
    NotTuned = (404, "not_tuned"),
    /// a promotion names a variant the table does not have
    UnknownVariant = (404, "unknown_variant"),
    /// a kill switch names a rule the table does not have
    UnknownRule = (404, "unknown_rule"),
    /// the endpoint exists with another method
    MethodNotAllowed = (405, "method_not_allowed"),
    /// a request that did not arrive in time
    RequestTimeout = (408, "request_timeout"),
    /// a hand-set failover that is not set
    UnknownFailover = (404, "unknown_failover"),
    /// a rollback with no earlier version kept
    NoPreviousVersion = (409, "no_previous_version"),
    /// a promotion with no variant ready
    NotReady = (409, "not_ready"),
    /// a failover while the router is off
    RouterOff = (409, "router_off"),
    /// a kill switch for a table without rules
    NoRules = (409, "no_rules"),
    /// a kill switch switching on a rule its file disables
    DisabledInFile = (409, "disabled_in_file"),
    /// a chunked request body
    LengthRequired = (411, "length_required"),
    /// a body above `server.max_body_bytes`
    BodyTooLarge = (413, "body_too_large"),
    /// a batch above `server.max_batch_lines`
    BatchTooLarge = (413, "batch_too_large"),
    /// an input field of another type than the table's schema declares
    SchemaMismatch = (422, "schema_mismatch"),
    /// too many headers, or too many bytes of them
    HeadersTooLarge = (431, "headers_too_large"),
    /// a bug in clef
    InternalError = (500, "internal_error"),
    /// promoted values could not be written
    StateWriteFailed = (500, "state_write_failed"),
    /// the router's forward failed and there is no fallback table
    UpstreamFailed = (502, "upstream_failed"),
    /// no healthy instance serves the table and there is no fallback table
    NoHealthyInstance = (503, "no_healthy_instance"),
    /// the server is shutting down
    Draining = (503, "draining"),
    /// the table's file has never loaded
    TableUnavailable = (503, "table_unavailable"),
    /// the snapshot listings' memory is taken
    SnapshotsBusy = (503, "snapshots_busy"),
    /// too many registry changes queued
    RegistryBusy = (503, "registry_busy"),
    /// the request memory is taken
    Overloaded = (503, "overloaded"),
}

impl ErrorCode {
    /// The HTTP status that answers it.
    pub fn status(self) -> u16 {
        self.row().0
    }

    /// The code as the API, the batch lines and the command line write it (`unknown_table`).
    pub fn as_str(self) -> &'static str {
        self.row().1
    }
}

/// A domain error the API reports: the code that answers it; its `Display` is the message.
pub trait ApiError: Display {
    /// The code (and so the status) that answers this error.
    fn error_code(&self) -> ErrorCode;
}

impl<E: ApiError + ?Sized> ApiError for &E {
    fn error_code(&self) -> ErrorCode {
        (**self).error_code()
    }
}

impl ApiError for InputError {
    fn error_code(&self) -> ErrorCode {
        match self {
            InputError::InvalidJson { .. } => ErrorCode::InvalidJson,
            InputError::NotAnObject { .. } => ErrorCode::NotAnObject,
            InputError::SchemaMismatch { .. } => ErrorCode::SchemaMismatch,
        }
    }
}

impl ApiError for crate::authz::UnknownProxy {
    fn error_code(&self) -> ErrorCode {
        ErrorCode::InvalidHeader
    }
}

impl ApiError for Refusal {
    fn error_code(&self) -> ErrorCode {
        match self {
            Refusal::NoDefaultTable | Refusal::UnknownTable { .. } => ErrorCode::UnknownTable,
            Refusal::Unavailable { .. } => ErrorCode::TableUnavailable,
            Refusal::Input(e) => e.error_code(),
        }
    }
}

impl ApiError for FeedbackError {
    fn error_code(&self) -> ErrorCode {
        match self {
            FeedbackError::InvalidJson(e) => e.error_code(),
            FeedbackError::InvalidBody(_) => ErrorCode::InvalidBody,
            FeedbackError::BadId(_) => ErrorCode::InvalidSnapshotId,
            FeedbackError::BadReward(_) => ErrorCode::InvalidReward,
            FeedbackError::Unknown(_) => ErrorCode::UnknownSnapshot,
        }
    }
}

impl ApiError for PromoteError {
    fn error_code(&self) -> ErrorCode {
        match self {
            PromoteError::NotTuned(_) => ErrorCode::NotTuned,
            PromoteError::NotReady(_) => ErrorCode::NotReady,
            PromoteError::UnknownVariant(_) => ErrorCode::UnknownVariant,
            PromoteError::Io(_) => ErrorCode::StateWriteFailed,
        }
    }
}

/// Answering a request with an error: the only writer of error bodies, so that status and code
/// always come from [`ErrorCode`].
pub trait ErrorAnswer {
    /// Answers `code` with its status and `message`.
    fn fail(&mut self, code: ErrorCode, message: &str);

    /// Answers a domain error with its code, status and message.
    fn refuse(&mut self, error: &dyn ApiError) {
        self.fail(error.error_code(), &error.to_string());
    }
}

impl ErrorAnswer for Response<'_> {
    fn fail(&mut self, code: ErrorCode, message: &str) {
        self.error(code.status(), code.as_str(), message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct() {
        let mut codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ErrorCode::ALL.len());
    }

    #[test]
    fn input_errors_are_400_or_422() {
        let e = InputError::NotAnObject { got: "array" };
        assert_eq!((e.error_code().status(), e.error_code().as_str()), (400, "not_an_object"));
        let e = InputError::SchemaMismatch { path: "a".into(), declared: "number", actual: "string" };
        assert_eq!(e.error_code().status(), 422);
        assert_eq!(Refusal::Input(e).error_code(), ErrorCode::SchemaMismatch);
    }
}
