//! A scripted OpenAI-compatible server (to be written).
