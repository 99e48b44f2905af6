// airvisor's run page: plain JavaScript, no dependencies, no build step. It polls the daemon's
// JSON API (/runs, /ui/api/runs/{id}?after=N, /ui/api/runs/{id}/logs) and draws its charts as
// inline SVG.
"use strict";

const POLL_MS = 1000;
const LOG_POLL_MS = 2000;
const RUNS_POLL_MS = 3000;
const LOG_LINES = 60;
const MAX_CLIENT_POINTS = 4000;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563"];
const SVG_NS = "http://www.w3.org/2000/svg";
const ANSI = /\x1b\[[0-9;?]*[ -/]*[@-~]/g;

const page = {
  runId: null,
  lastId: 0,
  series: {},
  authRequired: true,
  busy: false,
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

function clock(t) {
  return t ? new Date(t * 1000).toLocaleTimeString([], { hour12: false }) : "–";
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 90) return `${seconds.toFixed(0)} s`;
  if (seconds < 5400) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

async function getJSON(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return response.json();
}

// ---- runs list ---------------------------------------------------------------------------
async function refreshRuns() {
  let runs;
  try {
    runs = await getJSON("/runs?limit=50");
  } catch (err) {
    $("daemon-status").textContent = `daemon unreachable (${err.message})`;
    return;
  }
  $("daemon-status").textContent = `${runs.filter((r) => r.live).length} live run(s)`;
  const list = $("runs");
  list.replaceChildren(...runs.map((run) => {
    const item = el("li", { "data-run": run.id, class: run.id === page.runId ? "selected" : "" },
      el("strong", {}, run.name), " ",
      el("span", { class: `badge state-${run.state}` }, run.state),
      el("small", {}, `${run.id} · step ${run.step ?? "–"}`));
    item.addEventListener("click", () => select(run.id));
    return item;
  }));
  refreshRetention();
  if (!page.runId) {
    const chosen = fromHash() || (runs.find((r) => r.live) || runs[0] || {}).id;
    if (chosen) select(chosen);
    else { $("empty").hidden = false; $("run").hidden = true; }
  }
}

// What the state directory keeps and what the newest pruning pass removed (GET /state).
async function refreshRetention() {
  let state;
  try {
    state = await getJSON("/state");
  } catch (err) {
    return;  // an older daemon: nothing to say
  }
  const keeps = `keeps ${state.keep_runs || "all"} finished runs, ${state.keep_days || "any"} days`;
  const last = state.pruned[0];
  $("retention").textContent = last
    ? `state dir ${keeps}; last pruned ${clock(last.at)}: ${last.summary}`
    : `state dir ${keeps}; nothing pruned yet`;
  $("retention").title = last ? last.runs.map((r) => `${r.id}: ${r.reason}`).join("\n") : "";
}

function fromHash() {
  const match = /run=([^&]+)/.exec(location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

function select(runId) {
  if (runId === page.runId) return;
  page.runId = runId;
  page.lastId = 0;
  page.series = {};
  history.replaceState(null, "", `#run=${encodeURIComponent(runId)}`);
  $("logs").replaceChildren();
  for (const item of document.querySelectorAll("#runs li")) {
    item.classList.toggle("selected", item.dataset.run === runId);
  }
  $("empty").hidden = true;
  $("run").hidden = false;
  refreshRun();
  refreshLogs();
}

// ---- one run -------------------------------------------------------------------------------
function mergeSeries(incoming, incremental) {
  if (!incremental) { page.series = incoming; return; }
  for (const [name, points] of Object.entries(incoming)) {
    let mine = page.series[name] || [];
    if (name.startsWith("train:") && points.length && mine.length
        && points[0][0] <= mine[mine.length - 1][0]) {
      // A resumed attempt repeats steps: its points replace the earlier attempt's from there.
      mine = mine.filter((p) => p[0] < points[0][0]);
    }
    mine = mine.concat(points);
    if (mine.length > MAX_CLIENT_POINTS) {  // thin the older half, keep the recent half
      const half = Math.floor(mine.length / 2);
      mine = mine.slice(0, half).filter((_, i) => i % 2 === 0).concat(mine.slice(half));
    }
    page.series[name] = mine;
  }
}

async function refreshRun() {
  const runId = page.runId;
  if (!runId || page.busy) return;
  page.busy = true;
  try {
    const data = await getJSON(`/ui/api/runs/${encodeURIComponent(runId)}?after=${page.lastId}`);
    if (runId !== page.runId) return;
    mergeSeries(data.series, data.incremental);
    page.lastId = data.series_last_id;
    renderRun(data);
  } catch (err) {
    $("action-msg").textContent = `cannot read the run: ${err.message}`;
  } finally {
    page.busy = false;
  }
}

function renderRun(data) {
  const run = data.run;
  $("run-name").textContent = run.name;
  $("run-id").textContent = run.id;
  const state = $("run-state");
  // A live state whose supervisor is gone (killed) is not live: said, as `airvisor status` does.
  const gone = run.supervisor_alive === false && !run.live;
  state.textContent = gone ? `${run.state} · not live: supervisor gone` : run.state;
  state.className = `badge state-${run.state}`;
  state.title = gone ? `its supervisor (pid ${run.supervisor_pid}) is not running` : "";
  $("run-step").textContent = run.step === null ? "–"
    : !run.max_steps ? String(run.step)
    : run.steps_done === null || run.steps_done === run.step ? `${run.step} / ${run.max_steps}`
    : `${run.step} (${run.steps_done} / ${run.max_steps} done)`;
  $("run-rate").textContent = data.steps_per_minute === null ? "–"
    : `${data.steps_per_minute.toFixed(1)} steps/min`;
  $("run-attempt").textContent = String(run.attempt);
  $("run-restarts").textContent = String(run.restarts);
  $("run-since").textContent = run.live ? duration(run.seconds_since_progress) : "–";
  const error = $("run-error");
  error.hidden = !run.last_error;
  error.textContent = run.last_error ? `last error: ${run.last_error}` : "";
  $("stop-btn").disabled = !run.live;
  $("restart-btn").disabled = !run.live;
  renderTimeline(data.attempts, run);
  renderComponents(run.components);
  renderDeliveries(data.deliveries, data.notify_error);
  renderEvents(data.events);
  renderCharts();
}

function renderTimeline(attempts, run) {
  const now = Date.now() / 1000;
  $("timeline").tBodies[0].replaceChildren(...attempts.map((a) => {
    const ended = a.ended_at;
    const outcome = a.outcome || (a.number === run.attempt && run.live ? "running" : "–");
    return el("tr", { "data-attempt": a.number },
      el("td", {}, a.number),
      el("td", {}, clock(a.started_at)),
      el("td", {}, ended ? clock(ended) : "–"),
      el("td", {}, duration((ended || (run.live ? now : a.started_at)) - a.started_at)),
      el("td", {}, a.resume_step === null ? "start" : `step ${a.resume_step}`),
      el("td", { class: `status-${outcome}` }, outcome),
      el("td", { class: "reason ended" }, a.reason || ""),
      el("td", { class: "reason after" }, a.after || ""),
      scopeCell(a));
  }));
}

// How the recovery that launched an attempt was scoped (issue 22), worded as `airvisor status`
// words it; the policy's reason in words under it.
const SCOPE_LABELS = { keep_inference: "kept inference", full: "full" };

function scopeCell(a) {
  if (!a.scope) return el("td", { class: "scope" }, "–");
  const label = SCOPE_LABELS[a.scope] || a.scope;
  const reason = a.scope_reason && a.scope_reason !== "kept" ? ` (${a.scope_reason})` : "";
  return el("td", { class: "scope", "data-scope": a.scope },
    el("span", { class: "scope-what" }, `${label}${reason}`),
    a.scope_detail ? el("small", { class: "muted scope-detail" }, a.scope_detail) : "");
}

function renderComponents(components) {
  $("components").tBodies[0].replaceChildren(...components.map((c) => el("tr", {},
    el("td", {}, c.name), el("td", {}, c.kind), el("td", {}, c.state), el("td", {}, c.pid ?? "–"),
    el("td", {}, c.gpus.join(", ") || "–"), el("td", {}, c.exit_code ?? "–"),
    el("td", {}, c.restarts))));
}

function renderDeliveries(deliveries, notifyError) {
  const banner = $("notify-error");
  banner.hidden = !notifyError;
  banner.textContent = notifyError ? `daemon-wide notify file: ${notifyError}` : "";
  $("deliveries").tBodies[0].replaceChildren(...deliveries.map((d) => el("tr",
    { "data-status": d.status, "data-event": d.event },
    el("td", {}, clock(d.created_at)), el("td", { title: d.title || "" }, d.event),
    el("td", {}, d.target), el("td", { class: `status-${d.status}` }, d.status),
    el("td", {}, d.tries), el("td", { class: "reason" }, d.error || ""))));
}

function renderEvents(events) {
  $("events").replaceChildren(...events.slice().reverse().map((e) => e.kind === "stacks"
    ? stacksEvent(e)
    : el("li", {}, el("span", { class: "muted" }, `${clock(e.at)} ${e.kind} `),
         e.message.split("\n")[0])));
}

// A hang's stacks (airvisor.stacks): the verdict per process, the full stacks one click away
// (GET /runs/{id}/attempts/{n}/stacks, read when opened). Kept per event, so the open state
// survives the page's refreshes.
const stacksNodes = new Map();

function stacksEvent(e) {
  const key = `${page.runId} ${e.id}`;
  if (stacksNodes.has(key)) return stacksNodes.get(key);
  const pre = el("pre", { class: "stacks" }, "loading…");
  const details = el("details", { "data-attempt": e.data.attempt },
    el("summary", {}, `full stacks of attempt ${e.data.attempt}`), pre);
  details.addEventListener("toggle", () => {
    if (details.open && !details.dataset.loaded) loadStacks(page.runId, e.data.attempt, pre, details);
  });
  const lines = (e.data.verdicts || []).concat((e.data.notes || []).map((n) => `note: ${n}`));
  // One line across the ranks (which wait where, which one is elsewhere), before the verdicts.
  const across = e.data.summary
    ? [el("p", { class: "stacks-summary", "data-summary": "" }, e.data.summary)] : [];
  const node = el("li", { class: "stacks-event", "data-event": "stacks" },
    el("span", { class: "muted" }, `${clock(e.at)} ${e.kind} `),
    ...across,
    "where each process was before the stall kill:",
    el("ul", { class: "verdicts" }, ...lines.map((line) => el("li", {}, line))), details);
  stacksNodes.set(key, node);
  return node;
}

async function loadStacks(runId, attempt, pre, details) {
  try {
    const body = await getJSON(
      `/runs/${encodeURIComponent(runId)}/attempts/${encodeURIComponent(attempt)}/stacks`);
    pre.textContent = body.processes.map(stacksText).join("\n\n") || body.notes.join("\n");
    details.dataset.loaded = "1";
  } catch (err) {
    pre.textContent = `cannot read the stacks: ${err.message}`;
  }
}

function stacksText(p) {
  const lines = [p.verdict];
  if (p.note) lines.push(`note: ${p.note}`);
  for (const t of p.threads) {
    lines.push("", `Thread ${t.os_thread_id ?? t.thread_id} (${t.active ? "active" : "idle"}): `
      + `"${t.name ?? "?"}"`);
    for (const f of t.frames) lines.push(`    ${f.name} (${f.native ? f.short : `${f.short}:${f.line}`})`);
  }
  return lines.join("\n");
}

// ---- charts (inline SVG) ---------------------------------------------------------------------
function niceNumber(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a < 0.01 || a >= 1e5)) return v.toExponential(1);
  return a < 10 ? v.toFixed(3).replace(/\.?0+$/, "") : v.toFixed(0);
}

function drawChart(target, lines, xIsTime) {
  const box = target.getBoundingClientRect();
  const width = Math.max(box.width, 200);
  const height = Math.max(box.height, 120);
  const left = 48, right = 8, top = 8, bottom = 20;
  const all = lines.flatMap((l) => l.points);
  target.setAttribute("viewBox", `0 0 ${width} ${height}`);
  target.setAttribute("data-points", String(all.length));
  target.replaceChildren();
  if (!all.length) {
    const text = svg("text", { x: width / 2, y: height / 2, "text-anchor": "middle" });
    text.textContent = "no points yet";
    target.append(text);
    return;
  }
  let [x0, x1, y0, y1] = [Infinity, -Infinity, Infinity, -Infinity];
  for (const [x, y] of all) {
    x0 = Math.min(x0, x); x1 = Math.max(x1, x); y0 = Math.min(y0, y); y1 = Math.max(y1, y);
  }
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y0 -= 1; y1 += 1; }
  const sx = (x) => left + ((x - x0) / (x1 - x0)) * (width - left - right);
  const sy = (y) => top + (1 - (y - y0) / (y1 - y0)) * (height - top - bottom);
  for (let i = 0; i <= 3; i++) {
    const y = y0 + ((y1 - y0) * i) / 3;
    target.append(svg("line", { class: "grid", x1: left, x2: width - right, y1: sy(y), y2: sy(y) }));
    const label = svg("text", { x: left - 4, y: sy(y) + 3, "text-anchor": "end" });
    label.textContent = niceNumber(y);
    target.append(label);
  }
  for (const [x, anchor] of [[x0, "start"], [x1, "end"]]) {
    const label = svg("text", { x: sx(x), y: height - 4, "text-anchor": anchor });
    label.textContent = xIsTime ? clock(x) : `step ${niceNumber(x)}`;
    target.append(label);
  }
  lines.forEach((line, i) => {
    const points = line.points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`);
    const poly = svg("polyline", { points: points.join(" "), stroke: COLORS[i % COLORS.length],
                                   "data-series": line.name });
    target.append(poly);
  });
}

function renderCharts() {
  const s = page.series;
  drawChart($("chart-step"), [{ name: "step", label: "step", points: s.step || [] }], true);
  drawChart($("chart-reward"), [{ name: "train:reward", label: "reward",
                                  points: s["train:reward"] || [] }], false);
  drawChart($("chart-loss"), [{ name: "train:loss", label: "loss",
                                points: s["train:loss"] || [] }], false);
  const gpus = Object.keys(s).filter((n) => n.startsWith("gpu:")).sort();
  drawChart($("chart-gpu"), gpus.map((n) => ({ name: n, label: `GPU ${n.slice(4)}`,
                                               points: s[n] })), true);
  $("legend-gpu").replaceChildren(...gpus.map((n, i) => el("span",
    { class: "key", style: `color: ${COLORS[i % COLORS.length]}` }, ` ■ GPU ${n.slice(4)}`)));
}

// ---- logs ------------------------------------------------------------------------------------
async function refreshLogs() {
  const runId = page.runId;
  if (!runId) return;
  let body;
  try {
    body = await getJSON(`/ui/api/runs/${encodeURIComponent(runId)}/logs?lines=${LOG_LINES}`);
  } catch (err) {
    $("logs").dataset.error = err.message;
    return;
  }
  if (runId !== page.runId) return;
  for (const entry of body.logs) {
    let pre = document.getElementById(`log-${entry.component}`);
    if (!pre) {
      pre = el("pre", { id: `log-${entry.component}`, "data-component": entry.component });
      $("logs").append(el("div", {}, el("h3", {}, `${entry.component} log`), pre));
    }
    const text = entry.exists ? entry.text.replace(ANSI, "") : "(no log file yet)";
    if (pre.textContent !== text) {
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = text;
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
  }
}

// ---- stop / restart (need the token) -----------------------------------------------------------
async function act(action) {
  const runId = page.runId;
  const message = $("action-msg");
  const token = $("token").value.trim();
  localStorage.setItem("airvisor.token", token);
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  message.textContent = `${action} requested…`;
  try {
    const response = await fetch(`/runs/${encodeURIComponent(runId)}/${action}`,
                                 { method: "POST", headers });
    const body = await response.json().catch(() => ({}));
    if (response.status === 401) {
      message.textContent = "the daemon needs its token for this: paste the contents of the "
        + "daemon's token file into the token field";
    } else if (!response.ok) {
      message.textContent = `${action} refused: ${body.detail || response.status}`;
    } else {
      message.textContent = body.message || `${action} requested`;
    }
  } catch (err) {
    message.textContent = `${action} failed: ${err.message}`;
  }
  refreshRun();
}

async function start() {
  $("token").value = localStorage.getItem("airvisor.token") || "";
  getJSON("/health").then((health) => {
    page.authRequired = health.auth_required;
    $("token-box").hidden = !health.auth_required;
  }).catch((err) => { $("daemon-status").textContent = `daemon unreachable (${err.message})`; });
  $("stop-btn").addEventListener("click", () => act("stop"));
  $("restart-btn").addEventListener("click", () => act("restart"));
  window.addEventListener("hashchange", () => { const id = fromHash(); if (id) select(id); });
  window.addEventListener("resize", renderCharts);
  const linked = fromHash();
  if (linked) select(linked);  // load the linked run at once, beside the run list
  await refreshRuns();
  setInterval(refreshRuns, RUNS_POLL_MS);
  setInterval(refreshRun, POLL_MS);
  setInterval(refreshLogs, LOG_POLL_MS);
}

start();
