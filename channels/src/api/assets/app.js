// The web chat: sessions from the HTTP API, messages and live runs over the WebSocket.
// Model output only ever reaches the page through textContent or renderMarkdown (markdown.js),
// never as HTML.
"use strict";

const TOKEN_KEY = "switchboard.token";
const $ = (id) => document.getElementById(id);

const state = {
  token: localStorage.getItem(TOKEN_KEY) || sessionStorage.getItem(TOKEN_KEY) || "",
  chats: [],            // [{chat_id, key, agent, updated_at}]
  current: null,        // the chat shown (its id as this token knows it)
  socket: null,
  backoff: 500,
  bubbles: new Map(),   // run key (message id or run id) -> the assistant bubble of that run
  finished: new Set(),  // run keys whose answer is shown in full
  outbox: [],           // frames waiting for the socket to open
};

// What the owner console (console*.js) hooks into: called when the token is accepted, when
// the socket (re)opens, and with every frame.
const hooks = { ready: [], open: [], frame: [] };

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (state.token) headers.Authorization = "Bearer " + state.token;
  if (options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, Object.assign({}, options, { headers }));
  if (response.status === 401) throw new Unauthorized();
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new Error((body.error && body.error.message) || response.statusText);
  }
  return response.status === 204 ? null : response.json();
}

function setStatus(text) { $("status").textContent = text; }

// --- the token -------------------------------------------------------------------------

function askToken(problem) {
  $("token-error").hidden = !problem;
  $("token-error").textContent = problem || "";
  $("token").value = "";
  if (!$("token-dialog").open) $("token-dialog").showModal();
}

$("token-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  state.token = $("token").value.trim();
  try {
    await api("/v1/models");
  } catch (err) {
    askToken(err instanceof Unauthorized ? "That token was not accepted." : String(err.message));
    return;
  }
  (($("remember").checked) ? localStorage : sessionStorage).setItem(TOKEN_KEY, state.token);
  $("token-dialog").close();
  start();
});

$("forget-token").addEventListener("click", () => {
  localStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
});

// --- chats ---------------------------------------------------------------------------

async function loadAgents() {
  const models = await api("/v1/models");
  const select = $("agent");
  select.replaceChildren();
  select.append(new Option("the chat's own", ""));
  for (const model of models.data) select.append(new Option(model.id, model.id));
}

async function loadChats() {
  const listed = await api("/v1/sessions?limit=100");
  const seen = new Set();
  state.chats = [];
  for (const session of listed.sessions) {
    if (!session.chat_id || seen.has(session.chat_id)) continue;
    seen.add(session.chat_id);
    state.chats.push(session);
  }
  renderChats();
}

function renderChats() {
  const list = $("chats");
  list.replaceChildren();
  const chats = state.chats.slice();
  if (state.current && !chats.some((c) => c.chat_id === state.current)) chats.unshift({ chat_id: state.current });
  for (const chat of chats) {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = chat.chat_id;
    if (chat.agent && chat.agent !== "main") {
      const small = document.createElement("small");
      small.textContent = chat.agent;
      button.append(small);
    }
    button.setAttribute("aria-current", String(chat.chat_id === state.current));
    button.addEventListener("click", () => openChat(chat.chat_id));
    item.append(button);
    list.append(item);
  }
}

function sessionOf(chatId) {
  const chat = state.chats.find((c) => c.chat_id === chatId);
  return chat ? chat.key : null;
}

async function openChat(chatId) {
  state.current = chatId;
  location.hash = encodeURIComponent(chatId);
  $("chat-title").textContent = chatId;
  $("sidebar").classList.remove("open");
  $("messages").replaceChildren();
  state.bubbles.clear();
  renderChats();
  subscribe(chatId);
  // A chat that got its first message after the list was read (a reminder, a message from
  // another chat) is not in it yet: read the list again before deciding it is new.
  if (!sessionOf(chatId)) await loadChats();
  const key = sessionOf(chatId);
  if (!key || state.current !== chatId) return;
  const page = await api("/v1/sessions/" + encodeURIComponent(key) + "/messages?limit=100");
  for (const line of page.messages) showLine(line);
  scrollDown();
}

$("new-chat").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = $("new-chat-name").value.trim() || "web-" + Math.random().toString(36).slice(2, 8);
  $("new-chat-name").value = "";
  openChat(name);
});

$("open-sidebar").addEventListener("click", () => $("sidebar").classList.add("open"));
$("close-sidebar").addEventListener("click", () => $("sidebar").classList.remove("open"));

// --- messages ------------------------------------------------------------------------

function scrollDown() {
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

function bubble(role, text, markdown) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  if (markdown) div.append(window.renderMarkdown(text)); else div.textContent = text;
  $("messages").append(div);
  scrollDown();
  return div;
}

function toolLine(name, detail) {
  const details = document.createElement("details");
  details.className = "tool";
  const summary = document.createElement("summary");
  summary.textContent = name;
  const pre = document.createElement("pre");
  pre.textContent = detail || "";
  details.append(summary, pre);
  $("messages").append(details);
  scrollDown();
  return details;
}

// A stored line of the session.
function showLine(line) {
  if (line.role === "user") bubble("user", line.content, false);
  else if (line.role === "assistant") {
    for (const call of line.tool_calls || []) toolLine("tool: " + call.name, JSON.stringify(call.arguments));
    if (line.content) bubble("assistant", line.content, true);
  } else if (line.role === "tool") {
    toolLine((line.name || "tool") + " → result", line.content);
  } else if (line.role === "outbox") bubble("outbox", line.content, true);
}

function liveBubble(key) {
  let div = state.bubbles.get(key);
  if (!div) {
    div = bubble("assistant streaming", "", false);
    div.dataset.text = "";
    state.bubbles.set(key, div);
  }
  return div;
}

function finish(key, text, role, attachments) {
  if (state.finished.has(key)) { addAttachments(state.bubbles.get(key), attachments); return; }
  state.finished.add(key);
  const div = state.bubbles.get(key) || bubble(role || "assistant", "", false);
  div.className = "msg " + (role || "assistant");
  div.replaceChildren(window.renderMarkdown(text));
  addAttachments(div, attachments);
  state.bubbles.set(key, div);
  scrollDown();
}

// --- files that came with an answer ---------------------------------------------------

// Under the answer, once: each file a download link. The link fetches with the token (a plain
// link cannot send it) and saves what comes back under the file's name.
function addAttachments(div, attachments) {
  if (!div || !attachments || !attachments.length || div.querySelector(".attachments")) return;
  const list = document.createElement("ul");
  list.className = "attachments";
  for (const file of attachments) {
    const item = document.createElement("li");
    const name = file.name || "file";
    if (file.url) {
      const link = document.createElement("a");
      link.href = file.url;
      link.textContent = name;
      link.addEventListener("click", (event) => { event.preventDefault(); download(file.url, name); });
      item.append(link);
    } else item.textContent = name;
    if (typeof file.size === "number") item.append(" (" + shownSize(file.size) + ")");
    list.append(item);
  }
  div.append(list);
}

function shownSize(bytes) {
  if (bytes >= 1024 * 1024) return (bytes / (1024 * 1024)).toFixed(1) + " MB";
  return Math.max(1, Math.ceil(bytes / 1024)) + " KB";
}

async function download(url, name) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  const response = await fetch(url, { headers });
  if (!response.ok) { setStatus("cannot download " + name + ": " + response.statusText); return; }
  const saved = document.createElement("a");
  saved.href = URL.createObjectURL(await response.blob());
  saved.download = name;
  document.body.append(saved);
  saved.click();
  saved.remove();
  setTimeout(() => URL.revokeObjectURL(saved.href), 60000);
}

// --- the socket ----------------------------------------------------------------------

function connect() {
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws";
  const protocols = state.token ? ["switchboard", "bearer." + state.token] : ["switchboard"];
  const socket = new WebSocket(url, protocols);
  state.socket = socket;
  socket.addEventListener("open", () => {
    state.backoff = 500;
    setStatus("");
    if (state.current) subscribe(state.current);
    for (const frame of state.outbox.splice(0)) socket.send(JSON.stringify(frame));
    for (const hook of hooks.open) hook();
  });
  socket.addEventListener("message", (event) => onFrame(JSON.parse(event.data)));
  socket.addEventListener("close", () => {
    setStatus("reconnecting…");
    setTimeout(connect, state.backoff);
    state.backoff = Math.min(state.backoff * 2, 10000);
  });
}

function sendFrame(frame) {
  if (state.socket && state.socket.readyState === WebSocket.OPEN) state.socket.send(JSON.stringify(frame));
  else state.outbox.push(frame);
}

function subscribe(chatId) { sendFrame({ type: "subscribe", chat_id: chatId }); }

function onFrame(frame) {
  for (const hook of hooks.frame) hook(frame);
  // An admin watching every session gets other channels' events too: never this chat's.
  if (frame.channel && frame.channel !== "api") return;
  const here = frame.chat_id === undefined || frame.chat_id === null || frame.chat_id === state.current;
  const key = frame.inbound_id || frame.message_id || frame.run_id;
  switch (frame.type) {
    case "run.started":
      // The bubble comes with the first words, after any tool calls.
      if (here) setStatus("thinking…");
      break;
    case "chunk":
      if (here && !state.finished.has(key)) {
        const div = liveBubble(key);
        div.dataset.text += frame.text;
        div.textContent = div.dataset.text;
        scrollDown();
      }
      break;
    case "tool.call":
      if (here) { setStatus("using " + frame.name + "…"); toolLine("tool: " + frame.name, JSON.stringify(frame.arguments)); }
      break;
    case "tool.result":
      if (here) toolLine(frame.name + " → result", frame.content);
      break;
    case "run.completed":
      if (here) { finish(key, frame.reply, null, frame.attachments); setStatus(""); }
      break;
    case "run.failed":
      if (here) { finish(key, "The run failed: " + frame.error, "notice"); setStatus(""); }
      break;
    case "reply":
      if (here) { finish(frame.message_id, frame.content, frame.kind === "notice" ? "notice" : "assistant", frame.attachments); setStatus(""); }
      if (frame.session_key && !sessionOf(frame.chat_id)) loadChats();
      break;
    case "message": {
      // The first message of a chat the list does not have yet: list it.
      if (frame.chat_id && !sessionOf(frame.chat_id)) loadChats();
      if (!here) break;
      // A run this page watched (a reminder's, a heartbeat's) sent it: mark that bubble as
      // having come on its own; otherwise it is new.
      const shown = frame.inbound_id && state.bubbles.get(frame.inbound_id);
      if (shown) { shown.className = "msg outbox"; addAttachments(shown, frame.attachments); }
      else finish(frame.id, frame.content, "outbox", frame.attachments);
      break;
    }
    case "error":
      bubble("notice", (frame.error && frame.error.message) || "error", false);
      setStatus("");
      break;
  }
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const content = $("input").value.trim();
  if (!content || !state.current) return;
  $("input").value = "";
  bubble("user", content, false);
  const frame = { type: "message", chat_id: state.current, content, client_id: String(Date.now()) };
  if ($("agent").value) frame.model = $("agent").value;
  sendFrame(frame);
  setStatus("sending…");
});

$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
});

// --- start ---------------------------------------------------------------------------

async function start() {
  try {
    await loadAgents();
  } catch (err) {
    if (err instanceof Unauthorized) { askToken(state.token ? "The saved token is no longer accepted." : ""); return; }
    setStatus(String(err.message));
    return;
  }
  $("forget-token").hidden = !state.token;
  state.ready = true;
  for (const hook of hooks.ready) hook();
  await loadChats();
  const wanted = decodeURIComponent(location.hash.slice(1));
  connect();
  await openChat(wanted || (state.chats[0] && state.chats[0].chat_id) || "web");
}

start();
