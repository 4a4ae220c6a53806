// The owner console's cron jobs and heartbeats, and its sessions and runs (console.js has the
// shell and the helpers).
"use strict";

// --- cron jobs and heartbeats ----------------------------------------------------------

function field(label, input, className) {
  return el("label", "field" + (className ? " " + className : ""), [el("span", null, label), input]);
}

function input(name, placeholder, required) {
  const node = el("input");
  node.name = name;
  node.placeholder = placeholder || "";
  node.required = Boolean(required);
  node.autocomplete = "off";
  return node;
}

function select(name, options) {
  const node = el("select");
  node.name = name;
  for (const [value, label] of options) node.append(new Option(label, value));
  return node;
}

function cronForm(schedule) {
  const message = el("textarea");
  message.name = "message";
  message.required = true;
  message.rows = 2;
  message.placeholder = "What the agent is asked to do, or the reminder's text";
  const when = select("when", [["every", "Every"], ["cron", "Crontab"], ["at", "Once at"]]);
  const value = input("value", "1d, 2h30m", true);
  when.addEventListener("change", () => {
    value.placeholder = { every: "1d, 2h30m", cron: "0 8 * * 1-5", at: "+1h or 2026-12-01 09:00" }[when.value];
  });
  const agents = select("agent", schedule.agents.map((a) => [a, a]));
  const form = el("form", "cron-form", [
    field("Message", message),
    field("Send to", input("to", "telegram:123456 or api:me", true)),
    el("div", "row", [field("When", when), field("Schedule", value)]),
    el("div", "row", [
      field("Kind", select("kind", [["turn", "Agent turn"], ["reminder", "Reminder (as written)"], ["isolated", "Own session"]])),
      field("Agent", agents),
      field("Time zone", input("tz", schedule.timezone)),
    ]),
    field("Name", input("name", "optional")),
  ]);
  const submit = el("button", null, "Add job");
  submit.type = "submit";
  form.append(submit);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const job = { to: data.get("to"), message: data.get("message"), kind: data.get("kind"), agent: data.get("agent") };
    job[data.get("when")] = data.get("value");
    for (const key of ["tz", "name"]) if (data.get(key)) job[key] = data.get(key);
    act("/v1/admin/cron", post(job), "Job added.");
  });
  return form;
}

function cronJob(job) {
  const path = "/v1/admin/cron/" + encodeURIComponent(job.id);
  const next = job.state === "active" ? "next " + job.next_run : job.state === "paused" ? "paused" : "done";
  const last = job.last_run ? `last ${job.last_run} ${job.last_status || ""}${job.last_error ? ": " + job.last_error : ""}` : "never run";
  const actions = [];
  if (job.state === "active") actions.push(button("Pause", () => act(path + "/pause", post())));
  if (job.state === "paused") actions.push(button("Resume", () => act(path + "/resume", post())));
  actions.push(button("Run now", () => act(path + "/run", post())));
  actions.push(button("Delete", () => { if (confirm(`Delete "${job.name}"?`)) act(path, { method: "DELETE" }); }, "danger"));
  const item = el("li", "card job " + job.state, [
    el("div", "what", [
      el("strong", null, job.name),
      el("span", "muted", ` ${job.kind} · ${job.schedule} → ${job.to}${job.agent !== "main" ? " · " + job.agent : ""}`),
      el("div", "when", next + " · " + last),
    ]),
    el("div", "actions", actions),
  ]);
  item.dataset.id = job.id;
  return item;
}

function heartbeat(beat) {
  const hours = beat.active_hours ? " · " + beat.active_hours : "";
  const last = beat.last ? `last ${beat.last}: ${beat.last_outcome || ""}` : "not yet";
  return el("tr", null, [
    el("td", null, beat.agent),
    el("td", null, `every ${beat.every_minutes} min to ${beat.target}${hours}`),
    el("td", null, beat.next ? "next " + beat.next : "—"),
    el("td", null, last),
  ]);
}

consoleTabs.cron = {
  every: 15000,
  async load(section) {
    const schedule = await api("/v1/admin/cron");
    const parts = [el("p", "muted", "Times are in " + schedule.timezone + ".")];
    parts.push(heading("Jobs"));
    parts.push(schedule.jobs.length ? el("ul", "cards", schedule.jobs.map(cronJob)) : el("p", "muted", "No cron jobs."));
    parts.push(heading("New job"), cronForm(schedule));
    parts.push(heading("Heartbeats"));
    parts.push(schedule.heartbeats.length ? el("table", "list", [el("tbody", null, schedule.heartbeats.map(heartbeat))]) : el("p", "muted", "No agent has a heartbeat."));
    section.replaceChildren(...parts);
  },
};

// --- sessions and runs -----------------------------------------------------------------

const runsView = { session: "", commands: false };

function money(usd) { return usd === null || usd === undefined ? "—" : "$" + usd.toFixed(4); }

function runRow(run) {
  const tokens = `${run.tokens_estimated ? "~" : ""}${run.input_tokens} / ${run.output_tokens}`;
  return el("tr", "run " + run.status, [
    el("td", null, when(run.started_at)),
    el("td", null, run.session_key),
    el("td", null, run.kind),
    el("td", "status " + run.status, run.status),
    el("td", "num", tokens),
    el("td", "num", money(run.cost_usd)),
    el("td", null, run.model),
  ]);
}

function sessionRow(session) {
  const open = button(session.key, () => { runsView.session = session.key; showTab("runs"); }, "link");
  return el("tr", null, [
    el("td", null, [open]),
    el("td", "num", String(session.messages)),
    el("td", "num", money(session.cost_usd)),
    el("td", null, when(session.updated_at)),
  ]);
}

consoleTabs.runs = {
  async load(section) {
    const query = new URLSearchParams({ limit: "100" });
    if (runsView.session) query.set("session", runsView.session);
    if (runsView.commands) query.set("include_commands", "true");
    const [sessions, runs] = await Promise.all([api("/v1/sessions?limit=100"), api("/v1/runs?" + query)]);
    const commands = el("input");
    commands.type = "checkbox";
    commands.checked = runsView.commands;
    commands.addEventListener("change", () => { runsView.commands = commands.checked; showTab("runs"); });
    const total = runs.runs.reduce((sum, run) => sum + (run.cost_usd || 0), 0);
    const title = runsView.session ? "Runs of " + runsView.session : "Runs";
    const parts = [heading(title), el("div", "row", [
      el("label", "check", [commands, " Chat commands too"]),
      runsView.session ? button("All sessions", () => { runsView.session = ""; showTab("runs"); }) : null,
      el("span", "muted", `${runs.runs.length} runs shown, ${money(total)}`),
    ])];
    const head = ["Started", "Session", "Kind", "Status", "Tokens in / out", "Cost", "Model"].map((t) => el("th", null, t));
    parts.push(el("div", "scroll", [el("table", "list runs", [el("thead", null, [el("tr", null, head)]), el("tbody", null, runs.runs.map(runRow))])]));
    parts.push(heading("Sessions"));
    const sessionHead = ["Session", "Messages", "Cost", "Last active"].map((t) => el("th", null, t));
    parts.push(el("div", "scroll", [el("table", "list sessions", [el("thead", null, [el("tr", null, sessionHead)]), el("tbody", null, sessions.sessions.map(sessionRow))])]));
    section.replaceChildren(...parts);
  },
};
