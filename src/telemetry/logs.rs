//! Every log line written while a request is served names the request and its trace: the
//! formatter reads them from the task ([`RequestId::scope_here`]) and adds `request_id` and
//! `trace_id` to the line, after its own fields (text) or as members of its object (JSON). A
//! request pays nothing for it; a line pays one look-up.

use crate::protocol::request_id::RequestId;
use std::fmt::Write as _;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Wraps a formatter; `json` when its lines are JSON objects.
#[derive(Debug)]
pub struct WithRequest<F> {
    inner: F,
    json: bool,
}

impl<F> WithRequest<F> {
    /// `inner`'s lines, naming the request they were written for.
    pub fn new(inner: F, json: bool) -> Self {
        Self { inner, json }
    }
}

impl<S, N, F> FormatEvent<S, N> for WithRequest<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let Some(scope) = RequestId::scope_here() else {
            return self.inner.format_event(ctx, writer, event);
        };
        // Formatted aside (without colours) so the ids can go before the line's end.
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let line = line.trim_end_matches('\n');
        let request_id = scope.id();
        let trace_id = scope.trace_id();
        if self.json {
            let Some(open) = line.strip_suffix('}') else {
                return writeln!(writer, "{line}");
            };
            // The ids are hex and dashes: nothing in them needs escaping.
            let mut extra = String::new();
            if !line.contains("\"request_id\":") {
                let _ = write!(extra, ",\"request_id\":\"{request_id}\"");
            }
            if let Some(trace_id) = trace_id {
                let _ = write!(extra, ",\"trace_id\":\"{trace_id}\"");
            }
            return writeln!(writer, "{open}{extra}}}");
        }
        write!(writer, "{line} request_id={request_id}")?;
        match trace_id {
            Some(trace_id) => writeln!(writer, " trace_id={trace_id}"),
            None => writeln!(writer),
        }
    }
}
