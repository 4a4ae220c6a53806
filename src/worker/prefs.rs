//! `/model` and `/verbose`: what a chat chose for its session, stored with the session and
//! applied from its next turn (see [`super::session::set_prefs`]).

use switchboard_channels::contract::{InboundMessage, SessionKey};

use super::Intake;
use super::session::set_prefs;
use crate::store::StoreError;

/// `/model`: the agent's models and this chat's pick; `/model <name>` picks one (tried first,
/// the others still behind it when it fails); `/model default` goes back to the chain's order.
pub(super) async fn model(
    intake: &Intake,
    msg: &InboundMessage,
    key: &SessionKey,
    name: Option<&str>,
) -> Result<String, StoreError> {
    let route = intake.turns.agents.get().route(msg);
    let models = &route.agent.settings().models;
    let list = models.iter().enumerate().map(|(n, m)| format!("{}. {m}", n + 1)).collect::<Vec<_>>().join("\n");
    let Some(name) = name else {
        let current = intake.turns.store.session_prefs(key).await?.model;
        let current = match current {
            Some(model) => format!("This chat uses {model} first."),
            None => format!(
                "This chat uses the agent's models in order, {} first.",
                models.first().map_or("", String::as_str)
            ),
        };
        return Ok(format!(
            "{current}\nModels (when one fails, the next is tried):\n{list}\n\nPick one with /model <name>; /model default goes back to the order."
        ));
    };
    if name.eq_ignore_ascii_case("default") {
        intake.turns.store.set_session_model(key, None).await?;
        set_prefs(intake, key, Some(None), None);
        return Ok("This chat uses the agent's models in order again.".into());
    }
    // `openai/gpt-4o-mini`, or just `gpt-4o-mini` when no other provider has that model.
    let matching: Vec<&String> = models
        .iter()
        .filter(|label| {
            label.eq_ignore_ascii_case(name) || label.split_once('/').is_some_and(|(_, m)| m.eq_ignore_ascii_case(name))
        })
        .collect();
    match matching.as_slice() {
        [label] => {
            intake.turns.store.set_session_model(key, Some(label)).await?;
            set_prefs(intake, key, Some(Some((*label).clone())), None);
            Ok(format!("This chat now uses {label} first."))
        }
        [] => Ok(format!("{name:?} is not one of this agent's models:\n{list}")),
        _ => Ok(format!("{name:?} is more than one of this agent's models; give the provider too:\n{list}")),
    }
}

/// `/verbose`: whether progress messages are on; `/verbose on|off` sets it.
pub(super) async fn verbose(intake: &Intake, key: &SessionKey, value: Option<&str>) -> Result<String, StoreError> {
    let on = match value.map(str::to_ascii_lowercase).as_deref() {
        None => {
            let on = intake.turns.store.session_prefs(key).await?.verbose;
            let state = if on { "on" } else { "off" };
            return Ok(format!("Progress messages while tools run: {state}. /verbose on or /verbose off changes it."));
        }
        Some("on" | "true" | "yes" | "1") => true,
        Some("off" | "false" | "no" | "0") => false,
        Some(other) => return Ok(format!("{other:?} is neither on nor off.")),
    };
    intake.turns.store.set_verbose(key, on).await?;
    set_prefs(intake, key, None, Some(on));
    Ok(if on {
        "Progress messages on: you will see a short note as each tool starts.".into()
    } else {
        "Progress messages off.".into()
    })
}
