//! `switchboard api-token NAME`: a new API token, and the config entry that admits it. The
//! token is printed once; the config keeps only its SHA-256.

use std::io::Write;

use base64::Engine;
use switchboard_channels::api::access::token_sha256_hex;

use super::CliError;
use crate::config::api::{SCOPE_ADMIN, SCOPE_CHAT};

/// Random bytes in a token: 256 bits, beyond guessing.
const TOKEN_BYTES: usize = 32;
/// What every token starts with, so a leaked one is recognisable (and secret scanners find it).
const TOKEN_PREFIX: &str = "sb_";

/// Prints a new token for `name` and its `[channels.api.tokens.<name>]` entry.
pub(super) fn run(name: &str, admin: bool) -> Result<(), CliError> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(CliError::BadTokenName(name.to_owned()));
    }
    let token = new_token()?;
    let scopes = if admin { format!("[\"{SCOPE_CHAT}\", \"{SCOPE_ADMIN}\"]") } else { format!("[\"{SCOPE_CHAT}\"]") };
    let mut out = std::io::stdout().lock();
    writeln!(out, "# The token for {name:?}; it is shown only now, keep it secret:")?;
    writeln!(out, "#   {token}")?;
    writeln!(out, "# Add this to the config (it holds the token's SHA-256, not the token):")?;
    writeln!(out, "[channels.api.tokens.{name}]")?;
    writeln!(out, "sha256 = \"{}\"", token_sha256_hex(&token))?;
    writeln!(out, "scopes = {scopes}")?;
    writeln!(out, "# identity = \"{name}\"        # its messages come from api:{name}")?;
    writeln!(out, "# requests_per_minute = 60")?;
    Ok(())
}

fn new_token() -> Result<String, CliError> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes).map_err(|err| CliError::Random(err.to_string()))?;
    Ok(format!("{TOKEN_PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_url_safe() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 43);
        assert!(a[TOKEN_PREFIX.len()..].chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
    }
}
