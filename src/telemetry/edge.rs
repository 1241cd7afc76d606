//! Trace context at the edge. A partner's `traceparent` is its own claim about a trace, and a
//! partner can write anything there: by default a call starts a trace of peergate's own and
//! links to the partner's context, so a partner can neither join a trace it does not own nor
//! force sampling. A peer an administrator marked as trusted continues its trace instead; the
//! policy can drop partners' context altogether. `tracestate` is never carried on and
//! `baggage` never read (a classic way to smuggle data into the logs behind the door).

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

/// The W3C `traceparent` of a request: `00-<32 hex>-<16 hex>-<2 hex>`, strictly (a version
/// other than `00` is read as `00` when the rest is its shape, as the recommendation asks). An
/// all-zero id, upper-case hex or any other shape is no context at all.
pub fn partner_context(traceparent: &[u8]) -> Option<SpanContext> {
    let text = std::str::from_utf8(traceparent).ok()?.trim();
    let mut parts = text.splitn(5, '-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let rest = parts.next();
    let lower_hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !lower_hex(version, 2) || version == "ff" || (version == "00" && rest.is_some()) {
        return None;
    }
    if !lower_hex(trace, 32) || !lower_hex(span, 16) || !lower_hex(flags, 2) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    if trace_id == TraceId::INVALID || span_id == SpanId::INVALID {
        return None;
    }
    let sampled = u8::from_str_radix(flags, 16).ok()? & 1 == 1;
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    // The partner's tracestate is not carried: it is the partner's, and goes nowhere.
    Some(SpanContext::new(
        trace_id,
        span_id,
        flags,
        true,
        TraceState::default(),
    ))
}

/// The `traceparent` a request toward an agent behind the door carries: `context`'s.
pub fn traceparent(context: &SpanContext) -> String {
    format!(
        "00-{}-{}-{:02x}",
        context.trace_id(),
        context.span_id(),
        context.trace_flags().to_u8()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_well_formed_traceparent_is_read_and_written_back_alike() {
        let context = partner_context(GOOD.as_bytes()).unwrap();
        assert!(context.is_sampled() && context.is_remote());
        assert_eq!(traceparent(&context), GOOD);
        // A later version with more fields is read by its first four.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-more";
        assert!(!partner_context(later.as_bytes()).unwrap().is_sampled());
    }

    #[test]
    fn anything_else_is_no_context() {
        for bad in [
            "",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        ] {
            assert!(partner_context(bad.as_bytes()).is_none(), "{bad:?}");
        }
        assert!(partner_context(&[0xff, 0xfe]).is_none());
    }
}
