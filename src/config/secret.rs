//! [`Secret`]: a string that refuses to be printed.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A secret string (API key, bearer token).
///
/// `Debug`, `Display` and `Serialize` all mask the value as `***` (or show it empty when it is
/// empty, so "not configured" stays visible), so a secret cannot leak through a log line, an
/// error message or a dumped config. Use [`Secret::expose`] at the one place that needs it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; call this only where the value is sent to its destination.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn masked(&self) -> &'static str {
        if self.0.is_empty() { "" } else { "***" }
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.masked(), f)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.masked())
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.masked())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // serde's own type errors quote the offending value; a secret written as a bare number
        // must not be echoed back, so the error is replaced by one that says nothing about it.
        String::deserialize(deserializer).map(Self).map_err(|_| serde::de::Error::custom("a secret must be a string"))
    }
}
