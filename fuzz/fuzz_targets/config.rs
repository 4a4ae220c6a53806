//! Config parsing: any text as the config file gives a config or a typed error, never a panic.
//! A syntax error points inside the text; a config that loads gets any key it does not know
//! reported by its path.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use switchboard::config::{Config, ConfigError};

const FILE: &str = "fuzz.toml";
const UNKNOWN: &str = "fuzz_unknown_key";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Config::load_text_for_fuzzing(Path::new(FILE), text) {
        Ok(_) => {
            // The same file with one key too many at the top level.
            let extended = format!("{UNKNOWN} = 1\n{text}");
            match Config::load_text_for_fuzzing(Path::new(FILE), &extended) {
                Err(ConfigError::UnknownKeys { keys, .. }) => {
                    assert!(keys.iter().any(|key| key == UNKNOWN), "unknown key not named: {keys:?}")
                }
                other => panic!("an unknown top-level key was not reported: {other:?}"),
            }
        }
        Err(ConfigError::Syntax { line, column, .. }) => {
            assert!(line >= 1 && line <= text.lines().count() + 1, "syntax error at line {line} of {text:?}");
            assert!(column >= 1, "column {column}");
        }
        Err(ConfigError::UnknownKeys { keys, .. }) => assert!(!keys.is_empty(), "no key named"),
        Err(err) => {
            // Every other error renders to a message.
            assert!(!err.to_string().is_empty());
        }
    }
});
