// The owner console: shown when the token is an admin token (an admin route answers it),
// in sections that each read and change things through the /v1/admin routes. What the
// routes return is shown with textContent only, never parsed as HTML.
// The sections of console-cron.js and console-usage.js register in `consoleTabs`.
"use strict";

const consoleTabs = {};
const consoleState = { tab: "people", timers: [], watching: false };

// An element with a class and text (or children).
function el(tag, className, content) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (typeof content === "string") node.textContent = content;
  else if (Array.isArray(content)) node.append(...content.filter(Boolean));
  return node;
}

function button(label, onClick, className) {
  const node = el("button", className, label);
  node.type = "button";
  node.addEventListener("click", onClick);
  return node;
}

function heading(text) { return el("h3", null, text); }

function when(iso) {
  return iso ? new Date(iso).toLocaleString([], { dateStyle: "short", timeStyle: "short" }) : "—";
}

function consoleSay(text, problem) {
  const status = $("console-status");
  status.textContent = text;
  status.classList.toggle("error", Boolean(problem));
  clearTimeout(consoleState.sayTimer);
  consoleState.sayTimer = setTimeout(() => { status.textContent = ""; }, 6000);
}

// Runs an admin request; `done` (or else the answer's message, or the error) is said in the
// status line, and the section is read again.
async function act(path, options, done) {
  try {
    const answer = await api(path, options);
    consoleSay(done || (answer && answer.message) || "Done.");
  } catch (err) {
    consoleSay(err.message, true);
  }
  await showTab(consoleState.tab);
}

function post(body) {
  return body === undefined ? { method: "POST" } : { method: "POST", body: JSON.stringify(body) };
}

// --- the shell -------------------------------------------------------------------------

function openConsole(tab) {
  // Every session's run events, for the Live section: asked for once the console is used,
  // and again whenever the socket reconnects.
  if (!consoleState.watching) {
    consoleState.watching = true;
    sendFrame({ type: "watch_all" });
  }
  $("chat").hidden = true;
  $("sidebar").classList.remove("open");
  $("console").hidden = false;
  document.body.classList.add("console-open");
  showTab(tab || consoleState.tab);
}

function closeConsole() {
  for (const timer of consoleState.timers.splice(0)) clearInterval(timer);
  $("console").hidden = true;
  $("chat").hidden = false;
  document.body.classList.remove("console-open");
}

async function showTab(name) {
  consoleState.tab = name;
  for (const timer of consoleState.timers.splice(0)) clearInterval(timer);
  for (const section of document.querySelectorAll("#console-body .tab")) section.hidden = section.id !== "tab-" + name;
  for (const tab of document.querySelectorAll("#console-tabs button")) tab.setAttribute("aria-current", String(tab.dataset.tab === name));
  $("console-menu").value = name;
  const section = $("tab-" + name);
  const tab = consoleTabs[name];
  if (!tab) return;
  try {
    await tab.load(section);
  } catch (err) {
    section.replaceChildren(el("p", "error", err.message));
  }
  if (tab.every) consoleState.timers.push(setInterval(() => refresh(tab, section), tab.every));
}

// Reads a section again, unless the owner is typing or choosing in it.
function refresh(tab, section) {
  const busy = section.contains(document.activeElement) && document.activeElement.matches("input, select, textarea");
  if (!$("console").hidden && !busy) tab.load(section).catch(() => {});
}

function buildNavigation() {
  const nav = $("console-tabs");
  const menu = $("console-menu");
  nav.replaceChildren();
  menu.replaceChildren();
  for (const section of document.querySelectorAll("#console-body .tab")) {
    const name = section.id.slice("tab-".length);
    const tab = button(section.dataset.title, () => showTab(name));
    tab.dataset.tab = name;
    nav.append(tab);
    menu.append(new Option(section.dataset.title, name));
  }
  menu.addEventListener("change", () => showTab(menu.value));
}

// Shows the console's button when the token may use it: asked of an admin route, not guessed.
async function detectAdmin() {
  try {
    await api("/v1/admin/people");
  } catch (err) {
    return;
  }
  buildNavigation();
  $("open-console").hidden = false;
  hooks.open.push(() => { if (consoleState.watching) sendFrame({ type: "watch_all" }); });
}

$("open-console").addEventListener("click", () => openConsole());
$("close-console").addEventListener("click", closeConsole);
hooks.ready.push(detectAdmin);
if (state.ready) detectAdmin();

// --- people ----------------------------------------------------------------------------

function pendingPairing(request) {
  const who = el("div", "what", [
    el("strong", null, request.name || request.sender_id),
    el("span", "muted", ` ${request.channel} id ${request.sender_id} · code ${request.code} · until ${request.expires}`),
  ]);
  const path = `/v1/admin/pairings/${encodeURIComponent(request.channel)}/${encodeURIComponent(request.code)}/`;
  return el("li", "card", [
    who,
    el("div", "actions", [
      button("Approve", () => act(path + "approve", post()), "primary"),
      button("Deny", () => act(path + "deny", post()), "danger"),
    ]),
  ]);
}

function personRow(person, levels) {
  const select = el("select");
  select.setAttribute("aria-label", "Level of " + person.name);
  for (const level of levels) select.append(new Option(level, level));
  select.value = person.level;
  select.disabled = person.configured_owner;
  if (person.configured_owner) select.title = "An owner in the config (users.owners)";
  const identity = person.identities[0] && person.identities[0].identity;
  select.addEventListener("change", () => act(
    "/v1/admin/people/" + encodeURIComponent(identity) + "/level",
    { method: "PUT", body: JSON.stringify({ level: select.value }) },
    person.name + " is now " + select.value + ".",
  ));
  const ids = person.identities.map((i) => i.identity + (i.paired ? " (paired)" : "")).join(", ");
  return el("tr", null, [
    el("td", null, [el("strong", null, person.name), el("small", "muted block", ids)]),
    el("td", null, [select]),
    el("td", "num", String(person.tokens_this_month)),
    el("td", null, when(person.last_active)),
  ]);
}

function pairingDecision(decision) {
  const who = decision.name || decision.sender_id;
  return el("tr", null, [
    el("td", "status " + decision.decision, decision.decision),
    el("td", null, [el("strong", null, who), el("small", "muted block", `${decision.channel} id ${decision.sender_id} · code ${decision.code}`)]),
    el("td", null, "by " + (decision.decided_by || "—")),
    el("td", null, decision.decided),
  ]);
}

consoleTabs.people = {
  every: 15000,
  async load(section) {
    const answer = await api("/v1/admin/people");
    const parts = [heading("Waiting to pair")];
    if (answer.pending.length === 0) parts.push(el("p", "muted", "Nobody is waiting."));
    else parts.push(el("ul", "cards", answer.pending.map(pendingPairing)));
    parts.push(heading("People"));
    const head = el("tr", null, ["Person", "Level", "Tokens this month", "Last active"].map((t) => el("th", null, t)));
    const rows = answer.people.map((person) => personRow(person, answer.levels));
    const table = el("div", "scroll", [el("table", "list people", [el("thead", null, [head]), el("tbody", null, rows)])]);
    parts.push(answer.people.length ? table : el("p", "muted", "Nobody has written yet."));
    parts.push(heading("Pairing decisions"));
    parts.push(answer.decisions.length
      ? el("div", "scroll", [el("table", "list decisions", [el("tbody", null, answer.decisions.map(pairingDecision))])])
      : el("p", "muted", "No pairing decisions in the last 30 days."));
    section.replaceChildren(...parts);
  },
};

// --- approvals -------------------------------------------------------------------------

function waitingApproval(approval) {
  const path = "/v1/admin/approvals/" + encodeURIComponent(approval.code) + "/";
  return el("li", "card", [
    el("div", "what", [
      el("strong", null, approval.tool),
      el("span", "muted", ` asked by ${approval.requested_by} in ${approval.chat} · code ${approval.code} · until ${when(approval.expires_at)}`),
      el("pre", null, approval.arguments),
    ]),
    el("div", "actions", [
      button("Allow once", () => act(path + "allow_once", post()), "primary"),
      button("Allow for this chat", () => act(path + "allow_chat", post())),
      button("Deny", () => act(path + "deny", post()), "danger"),
    ]),
  ]);
}

function decidedApproval(approval) {
  const by = approval.decided_by ? " by " + approval.decided_by : "";
  const at = approval.decided_at ? " " + when(approval.decided_at) : "";
  const scope = approval.scope === "chat" ? " for the chat" : "";
  return el("tr", null, [
    el("td", "status " + approval.status, approval.status + scope + by + at),
    el("td", null, `${approval.tool} in ${approval.chat}, asked by ${approval.requested_by}`),
    el("td", "muted", approval.reason || approval.code),
  ]);
}

consoleTabs.approvals = {
  every: 5000,
  async load(section) {
    const { approvals } = await api("/v1/admin/approvals");
    const waiting = approvals.filter((a) => a.status === "pending");
    const decided = approvals.filter((a) => a.status !== "pending");
    const parts = [heading("Waiting for you")];
    parts.push(waiting.length ? el("ul", "cards", waiting.map(waitingApproval)) : el("p", "muted", "No tool call is waiting."));
    parts.push(heading("Decided"));
    parts.push(decided.length ? el("table", "list", [el("tbody", null, decided.map(decidedApproval))]) : el("p", "muted", "No decisions yet."));
    section.replaceChildren(...parts);
  },
};
