//! Input and output hygiene: the guard that looks at what users send before the model sees
//! it, and the sanitizer that cleans what the model writes before a chat sees it.

pub mod guard;
pub mod sanitize;
pub mod stream;

pub use guard::{Finding, Guard, GuardError, InjectionKind, Screening, Verdict};
pub use sanitize::{Sanitized, sanitize_reply};
pub use stream::StreamCleaner;
