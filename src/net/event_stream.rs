//! Reading a Server-Sent Events stream that peergate receives (a model's streamed answer, an
//! upstream agent's events, an agent `peergate call` talks to).

/// Splits a Server-Sent Events byte stream into the data of each event (its `data:` lines
/// joined by newlines), whatever the chunk boundaries.
#[derive(Default)]
pub struct ServerSentEvents {
    pending: Vec<u8>,
    /// Where to look for the next line end (bytes before it hold none).
    scanned: usize,
    data: Vec<String>,
}

impl ServerSentEvents {
    /// Takes `chunk`; returns the data of the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(chunk);
        let mut complete = Vec::new();
        while let Some(offset) = self.pending[self.scanned..]
            .iter()
            .position(|&b| b == b'\n')
        {
            let end = self.scanned + offset;
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.scanned = 0;
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    complete.push(self.data.join("\n"));
                    self.data.clear();
                }
            } else if let Some(data) = line.strip_prefix("data:") {
                self.data
                    .push(data.strip_prefix(' ').unwrap_or(data).to_owned());
            }
        }
        self.scanned = self.pending.len();
        complete
    }

    /// The stream ended: the event still being read, if any.
    pub fn finish(&mut self) -> Vec<String> {
        let mut rest = self.push(b"\n");
        rest.extend(self.push(b"\n"));
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_data_is_found_across_chunk_boundaries() {
        let mut events = ServerSentEvents::default();
        assert!(events.push(b"data: {\"a\"").is_empty());
        assert_eq!(events.push(b":1}\r\n\n: comment\n"), ["{\"a\":1}"]);
        // Several data lines are one event; the last event may lack its blank line.
        assert_eq!(events.push(b"data: x\ndata: y\n\ndata:[DONE]"), ["x\ny"]);
        assert_eq!(events.finish(), ["[DONE]"]);
    }
}
