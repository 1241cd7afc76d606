//! What the gateway says over HTTP that is not an agent's answer.

pub mod refusal;
