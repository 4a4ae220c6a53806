//! OpenAI-compatible chat completions (to be written).
