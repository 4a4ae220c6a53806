//! The Telegram channel: long polling (or a webhook) in, Bot API messages out, on teloxide's
//! request types.

pub mod format;
mod split;
