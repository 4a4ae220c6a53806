//! A system message made for a person (their cron job, their sub-agent) runs with that
//! person's tools, read when it runs; one made by the operator runs as owner. Through a real
//! worker, store and bus (on both buses); the scripted model shows which tools each run was
//! offered.

use crate::common::{BusKind, Setup, next_out};
use switchboard::config::{Identity, Level};
use switchboard::users::AccessPolicy;
use switchboard::worker::WorkerSettings;
use switchboard_channels::contract::{ChatAddress, InboundMessage, Origin};
use switchboard_testkit::fake_llm::FakeLlm;

fn cron_message(id: &str, on_behalf_of: Option<&str>) -> InboundMessage {
    let chat = ChatAddress { channel: "telegram".into(), chat_id: "42".into(), thread_id: None, is_group: false };
    let origin = Origin { kind: "cron".into(), id: "job1".into() };
    let mut msg = InboundMessage::system(id.into(), chat, origin, "scheduled: tidy up");
    if let Some(person) = on_behalf_of {
        msg.set_on_behalf_of(person);
    }
    msg
}

/// The names of the tools the model was offered in request `n`.
fn offered(llm: &FakeLlm, n: usize) -> Vec<String> {
    let requests = llm.requests();
    let tools = requests[n]["tools"].as_array().cloned().unwrap_or_default();
    let mut names: Vec<String> =
        tools.iter().filter_map(|tool| tool["function"]["name"].as_str().map(str::to_owned)).collect();
    names.sort();
    names
}

async fn tools_of_the_person_acted_for(kind: BusKind) {
    // `current_time` (guest), the file tools (user) and `exec` (admin) under the default levels.
    let settings = WorkerSettings { access: AccessPolicy::default(), ..WorkerSettings::default() };
    let setup = Setup { settings, message_tool: false, file_tools: true, exec: true, ..Setup::new(kind) };
    let h = setup.start().await;
    let user = Identity::new("telegram", "7");
    h.store.set_level(&user, Level::User).await.unwrap();
    let mut replies = h.outbound("telegram").await;

    let cases = [
        // Made by the operator (a heartbeat, `switchboard cron add`): the owner's tools.
        (None, &["current_time", "delete_file", "edit_file", "exec", "list_dir", "read_file", "write_file"][..]),
        // A user's job: their tools; `exec` is admin-only.
        (Some("telegram:7"), &["current_time", "delete_file", "edit_file", "list_dir", "read_file", "write_file"][..]),
        // A guest's (or someone unknown): only what guests get.
        (Some("telegram:99"), &["current_time"][..]),
    ];
    for (n, (person, expected)) in cases.iter().enumerate() {
        h.send(&cron_message(&format!("cron:job1:{n}"), *person)).await;
        let reply = next_out(&mut replies).await;
        assert_eq!(reply.content, "echo: scheduled: tidy up");
        assert_eq!(offered(&h.llm, n), *expected, "acting for {person:?}");
    }
    h.shutdown.cancel();
    h.worker.await.unwrap();
}

crate::both_buses! {
    a_system_message_gets_the_tools_of_the_person_it_acts_for => tools_of_the_person_acted_for();
}
