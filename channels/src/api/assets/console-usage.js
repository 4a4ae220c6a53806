// The owner console's usage charts (SVG drawn here, nothing loaded from elsewhere), the
// doctor's checks, and the live feed of every session's runs (console.js has the shell).
"use strict";

const SVG = "http://www.w3.org/2000/svg";

function svgNode(tag, attributes, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function tokens(count) {
  if (count >= 1e6) return (count / 1e6).toFixed(1) + "M";
  if (count >= 1e3) return (count / 1e3).toFixed(1) + "k";
  return String(count);
}

// A chart of one value per day: stacked bars for `parts` ([[class, value(day)], …]), or a
// line when `line` is set. Every day has its place; days without runs draw nothing.
function dayChart(id, label, days, parts, format, line) {
  const [width, height, left, bottom, top] = [640, 170, 52, 22, 10];
  const total = (day) => parts.reduce((sum, [, value]) => sum + value(day), 0);
  const max = Math.max(0, ...days.map(total));
  const chart = svgNode("svg", { id, class: "chart", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": label });
  const plot = height - bottom - top;
  const band = (width - left - 4) / Math.max(days.length, 1);
  chart.append(svgNode("line", { class: "axis", x1: left, y1: top + plot, x2: width - 4, y2: top + plot }));
  chart.append(svgNode("text", { class: "tick", x: left - 6, y: top + 8, "text-anchor": "end" }, format(max)));
  chart.append(svgNode("text", { class: "tick", x: left - 6, y: top + plot, "text-anchor": "end" }, format(0)));
  const step = Math.ceil(days.length / 8);
  const points = [];
  days.forEach((day, i) => {
    const x = left + i * band;
    if (i % step === 0) chart.append(svgNode("text", { class: "tick", x: x + band / 2, y: height - 6, "text-anchor": "middle" }, day.day.slice(5)));
    if (line) {
      const y = top + plot - (max > 0 ? (total(day) / max) * plot : 0);
      points.push(`${x + band / 2},${y}`);
      if (total(day) > 0) {
        const dot = svgNode("circle", { class: "dot", cx: x + band / 2, cy: y, r: 3, "data-day": day.day });
        dot.append(svgNode("title", {}, `${day.day}: ${format(total(day))}`));
        chart.append(dot);
      }
      return;
    }
    let y = top + plot;
    for (const [className, value] of parts) {
      const h = max > 0 ? (value(day) / max) * plot : 0;
      if (h <= 0) continue;
      y -= h;
      const bar = svgNode("rect", { class: "bar " + className, x: x + band * 0.15, y, width: band * 0.7, height: h, "data-day": day.day });
      bar.append(svgNode("title", {}, `${day.day}: ${format(value(day))} ${className}`));
      chart.append(bar);
    }
  });
  if (line) chart.insertBefore(svgNode("polyline", { class: "line", points: points.join(" ") }), chart.firstChild);
  return chart;
}

// A cost as far as prices are known: "no price" when none of the runs had one (not $0).
function knownCost(totals) {
  if (totals.runs > 0 && totals.unpriced_runs === totals.runs) return "no price";
  return money(totals.cost_usd) + (totals.unpriced_runs ? " +?" : "");
}

// One horizontal bar per person, by tokens, with their cost.
function peopleChart(people) {
  const [width, row, left] = [640, 26, 170];
  const max = Math.max(0, ...people.map((p) => p.input_tokens + p.output_tokens));
  const chart = svgNode("svg", { id: "usage-people", class: "chart", viewBox: `0 0 ${width} ${row * people.length + 4}`, role: "img", "aria-label": "Tokens per person" });
  people.forEach((person, i) => {
    const used = person.input_tokens + person.output_tokens;
    const y = i * row + 4;
    const w = max > 0 ? (used / max) * (width - left - 150) : 0;
    chart.append(svgNode("text", { class: "label", x: left - 8, y: y + 15, "text-anchor": "end" }, person.name.slice(0, 24)));
    const bar = svgNode("rect", { class: "bar person", x: left, y, width: Math.max(w, used > 0 ? 1 : 0), height: row - 8 });
    bar.append(svgNode("title", {}, `${person.name}: ${used} tokens`));
    chart.append(bar);
    chart.append(svgNode("text", { class: "label", x: left + w + 6, y: y + 15 }, `${tokens(used)} · ${knownCost(person)}`));
  });
  return chart;
}

const usageView = { days: 30 };

consoleTabs.usage = {
  async load(section) {
    const usage = await api("/v1/admin/usage?days=" + usageView.days);
    const period = select("days", [["7", "7 days"], ["30", "30 days"], ["90", "90 days"]]);
    period.value = String(usageView.days);
    period.addEventListener("change", () => { usageView.days = Number(period.value); showTab("usage"); });
    const t = usage.total;
    const unpriced = t.unpriced_runs ? ` (${t.unpriced_runs} runs of models without a price not counted)` : "";
    const parts = [
      el("div", "row", [field("Period", period, "compact"), el("p", "muted", `${usage.from} to ${usage.to} (${usage.timezone})`)]),
      el("p", "summary", `${t.runs} runs, ${tokens(t.input_tokens)} tokens in (${tokens(t.cache_read_tokens)} from the cache) and ${tokens(t.output_tokens)} out, ${knownCost(t)}${unpriced}.`),
      heading("Tokens per day"),
      dayChart("usage-days", "Tokens per day", usage.days, [["input", (d) => d.input_tokens], ["output", (d) => d.output_tokens]], tokens),
      el("p", "legend", [el("span", "key input", "in"), el("span", "key output", "out")]),
      heading("Cost per day"),
    ];
    // Without any price there is no cost to draw; a flat line at $0 would say it was free.
    parts.push(t.runs > t.unpriced_runs
      ? dayChart("usage-cost", "Cost per day", usage.days, [["cost", (d) => d.cost_usd]], money, true)
      : el("p", "muted", "No cost to show: the models used have no price. Give them one under [prices] in the config."));
    parts.push(heading("Per person"));
    parts.push(usage.people.length ? peopleChart(usage.people) : el("p", "muted", "No runs in this period."));
    section.replaceChildren(...parts);
  },
};

// --- health ----------------------------------------------------------------------------

consoleTabs.health = {
  async load(section) {
    section.replaceChildren(el("p", "muted", "Checking… (each check waits at most 5 s)"));
    const { checks } = await api("/v1/admin/health");
    const rows = checks.map((check) => el("tr", "health-check", [
      el("td", "status " + check.status, check.status),
      el("td", null, check.check),
      el("td", null, [el("span", null, check.detail), check.fix ? el("small", "muted block", "→ " + check.fix) : null]),
    ]));
    section.replaceChildren(
      el("div", "row", [button("Check again", () => showTab("health")), el("span", "muted", "The checks of switchboard doctor.")]),
      el("table", "list", [el("tbody", null, rows)]),
    );
  },
};

// --- live ------------------------------------------------------------------------------

const live = { runs: new Map(), max: 100 };

const LIVE_STATUS = {
  "run.started": () => "thinking…",
  "tool.call": (frame) => "using " + frame.name + "…",
  "tool.result": (frame) => frame.name + " answered",
  "run.completed": () => "done",
  "run.failed": (frame) => "failed: " + frame.error,
};

function liveFrame(frame) {
  if (!frame.run_id || !frame.session_key || !(frame.type in LIVE_STATUS || frame.type === "chunk")) return;
  let run = live.runs.get(frame.run_id);
  if (!run) {
    run = { session: frame.session_key, at: frame.at, status: "", text: "" };
    live.runs.set(frame.run_id, run);
    if (live.runs.size > live.max) live.runs.delete(live.runs.keys().next().value);
  }
  if (frame.type === "chunk") run.text += frame.text;
  else run.status = LIVE_STATUS[frame.type](frame);
  if (frame.type === "run.completed" && frame.reply) run.text = frame.reply;
  if (consoleState.tab === "live" && !$("console").hidden) renderLive($("tab-live"));
}

function renderLive(section) {
  const rows = [...live.runs.entries()].reverse().map(([id, run]) => {
    const item = el("li", "card live-run", [
      el("div", "what", [el("strong", null, run.session), el("span", "muted", " " + when(run.at) + " · " + run.status)]),
      run.text ? el("div", "text", run.text.slice(-400)) : null,
    ]);
    item.dataset.run = id;
    return item;
  });
  section.replaceChildren(
    el("p", "muted", "Every session's runs as they happen, newest first."),
    rows.length ? el("ul", "cards", rows) : el("p", "muted", "Nothing has run since this page opened."),
  );
}

hooks.frame.push(liveFrame);

consoleTabs.live = {
  async load(section) { renderLive(section); },
};
