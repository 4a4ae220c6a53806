//! `current_time`: the date and time now, so the model need not guess.

use async_trait::async_trait;
use chrono::{FixedOffset, SecondsFormat, Utc};
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError};

/// Tells the current date and time in UTC or at a fixed UTC offset.
pub struct CurrentTime;

#[async_trait]
impl Tool for CurrentTime {
    fn name(&self) -> &str {
        "current_time"
    }

    fn description(&self) -> &str {
        "Returns the current date and time (RFC 3339) and weekday, in UTC or at a UTC offset such as +02:00."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "utc_offset": {"type": "string", "description": "Offset from UTC like +02:00 or -05:30; default UTC"}
            }
        })
    }

    async fn execute(&self, arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        let offset = match arguments.get("utc_offset").and_then(Value::as_str) {
            None | Some("") | Some("Z") | Some("UTC") => FixedOffset::east_opt(0),
            Some(text) => parse_offset(text),
        }
        .ok_or_else(|| ToolError::InvalidArguments("utc_offset must look like +02:00 or -05:30".into()))?;
        let now = Utc::now().with_timezone(&offset);
        Ok(format!("{} ({})", now.to_rfc3339_opts(SecondsFormat::Secs, true), now.format("%A")))
    }
}

fn parse_offset(text: &str) -> Option<FixedOffset> {
    let (sign, rest) = match text.as_bytes().first()? {
        b'+' => (1, &text[1..]),
        b'-' => (-1, &text[1..]),
        _ => return None,
    };
    let (hours, minutes) = rest.split_once(':').unwrap_or((rest, "0"));
    let seconds = hours.parse::<i32>().ok()? * 3600 + minutes.parse::<i32>().ok()? * 60;
    FixedOffset::east_opt(sign * seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reports_time_at_an_offset() {
        let out = CurrentTime.execute(json!({"utc_offset": "+05:30"}), &ToolContext::default()).await.unwrap();
        assert!(out.contains("+05:30"), "{out}");
        let utc = CurrentTime.execute(json!({}), &ToolContext::default()).await.unwrap();
        assert!(utc.contains('Z'), "{utc}");
    }

    #[tokio::test]
    async fn bad_offset_is_an_argument_error() {
        let err = CurrentTime.execute(json!({"utc_offset": "Europe/Paris"}), &ToolContext::default()).await;
        assert!(matches!(err, Err(ToolError::InvalidArguments(_))));
    }
}
