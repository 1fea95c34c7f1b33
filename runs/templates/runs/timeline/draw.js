// The timeline drawn from `runs` (runs.js): a lane per session, a bar per run (on rows of their own where runs
// overlap, as waiting ones do), on an axis that covers the chosen window at most; a run's detail; the queue summary;
// the buttons of a paused bar.
const seconds = (iso) => iso ? Date.parse(iso) / 1000 : null;

function span(run) {
  const body = run.body || {};
  const started = seconds(body.started_at);
  const ended = seconds(body.completed_at) || run.endedBy;
  if (!started) return {from: run.accepted, to: FINISHED.has(body.status) && ended ? ended : now(), waiting: !FINISHED.has(body.status)};
  if (body.status === "PAUSED") return {from: started, to: now(), waiting: false};
  return {from: started, to: ended || now(), waiting: false};
}

// Runs that ended longer ago than the window leave; the axis starts at the earliest run left, or the window's start.
function forgetOld(at) {
  for (const run of [...runs.values()]) {
    const {to} = span(run);
    if (FINISHED.has(run.body.status) && to < at - windowSeconds() && !run.streaming) {
      runs.delete(run.run_id);
      document.getElementById(`bar-${run.run_id}`)?.remove();
    }
  }
  for (const session of [...sessions]) {
    if (![...runs.values()].some((run) => run.session_id === session)) {
      sessions.splice(sessions.indexOf(session), 1);
      document.querySelector(`.lane[data-session="${CSS.escape(session)}"]`)?.remove();
    }
  }
}

function draw() {
  const at = now();
  forgetOld(at);
  $("empty").hidden = runs.size > 0;
  $("empty").textContent = listed ? "No runs in this window: submit one above, or from anywhere."
                                  : "No runs submitted from this page yet.";
  const t0 = Math.max(at - windowSeconds(), Math.min(at, ...[...runs.values()].map((run) => span(run).from)));
  const width = Math.max(10, at - t0 + 1);
  const lanes = $("lanes");
  for (const session of sessions) {
    let lane = document.querySelector(`.lane[data-session="${CSS.escape(session)}"]`);
    if (!lane) {
      lane = document.createElement("div");
      lane.className = "lane"; lane.dataset.session = session;
      lane.innerHTML = `<div class="lane-name"></div><div class="track"></div>`;
      lane.firstChild.textContent = session;
      lanes.append(lane);
    }
  }
  const rows = stack();
  for (const run of runs.values()) drawBar(run, t0, width, rows.get(run));
  for (const lane of lanes.querySelectorAll(".lane")) {
    const count = Math.max(1, ...[...runs.values()].filter((run) => run.session_id === lane.dataset.session).map((run) => rows.get(run) + 1));
    lane.querySelector(".track").style.height = `${0.6 + 2.6 * count}rem`;
  }
  const axis = $("axis");
  axis.innerHTML = "";
  const step = [1, 5, 10, 30, 60, 120, 300].find((candidate) => width / candidate <= 12) || 600;
  for (let s = 0; s <= width; s += step) {
    const tick = document.createElement("span");
    tick.style.left = `${(100 * s) / width}%`; tick.textContent = s < 60 || s % 60 ? `${s}s` : `${s / 60}m`;
    axis.append(tick);
  }
}

// Each run's row in its lane: the first whose runs have ended when it begins. A session runs one run at a time,
// so only the runs waiting behind it need rows of their own.
function stack() {
  const rows = new Map();
  const ends = new Map();  // session -> the end of each row's last run
  for (const run of [...runs.values()].sort((a, b) => span(a).from - span(b).from)) {
    const {from, to} = span(run);
    const lane = ends.get(run.session_id) || [];
    let row = lane.findIndex((end) => end <= from);
    if (row < 0) row = lane.length;
    lane[row] = to;
    ends.set(run.session_id, lane);
    rows.set(run, row);
  }
  return rows;
}

function drawBar(run, t0, width, row) {
  const track = document.querySelector(`.lane[data-session="${CSS.escape(run.session_id)}"] .track`);
  let bar = document.getElementById(`bar-${run.run_id}`);
  if (!bar) {
    bar = document.createElement("a");
    bar.id = `bar-${run.run_id}`; bar.href = "#detail"; bar.dataset.runId = run.run_id;
    bar.addEventListener("click", () => showDetail(run));
    track.append(bar);
  }
  const {from, to, waiting} = span(run);
  const status = run.body.status || "PENDING";
  const left = Math.max(from, t0);
  bar.className = `bar ${status}`;
  bar.dataset.status = status;
  bar.dataset.start = waiting ? "" : String(from);
  bar.dataset.end = FINISHED.has(status) ? String(to) : "";
  // Placed by its right end, so that a paused bar, which is wide enough for its buttons, grows to the left.
  bar.style.right = `${(100 * (t0 + width - to)) / width}%`;
  bar.style.width = `${(100 * Math.max(0, to - left)) / width}%`;
  bar.style.top = `${0.45 + 2.6 * row}rem`;
  const waitingOn = run.body.waiting_on ? ` · waiting on ${run.body.waiting_on.slice(0, 8)}` : "";
  const text = status === "PAUSED" ? `${run.label} · holds ${run.session_id}` : `${run.label}${waiting ? waitingOn : ""}`;
  bar.title = `${run.run_id} ${status}${waitingOn}${from < t0 ? ` · since ${new Date(from * 1000).toLocaleString()}` : ""}`;
  if (bar.dataset.text !== text || (status === "PAUSED") !== !!bar.querySelector("button")) {
    bar.dataset.text = text;
    bar.textContent = "";
    if (status === "PAUSED") {  // the decision first, where it is always visible
      for (const [label, action] of [["Continue", continueRun], ["Cancel", cancelRun]]) {
        const button = document.createElement("button");
        button.type = "button"; button.textContent = label; button.className = label.toLowerCase();
        button.addEventListener("click", (event) => { event.preventDefault(); event.stopPropagation(); action(run); });
        bar.append(button);
      }
    }
    bar.append(text);
  }
}

async function continueRun(run) {
  const tools = (run.body.tools || []).map((tool) => ({...tool, confirmed: true}));
  const response = await api(`${prefix(run)}/continue`, {
    method: "POST", body: form({session_id: run.session_id, tools: JSON.stringify(tools), background: "true", stream: "false"}),
  });
  if (response.status !== 202) { $("problem").textContent = `continue: ${response.status}`; return; }
  changed(run);
}

async function cancelRun(run) {
  const response = await api(`${prefix(run)}/cancel?session_id=${encodeURIComponent(run.session_id)}`, {method: "POST"});
  if (!response.ok) { $("problem").textContent = `cancel: ${response.status}`; return; }
  changed(run);
}

let shown = null;
async function showDetail(run) {
  shown = run.run_id;
  $("detail").hidden = false;
  $("detail-id").textContent = run.run_id;
  const body = run.body || {};
  const events = (body.events || []).map((event) => `${event.event_index} ${event.event}`).join("\n");
  $("detail-body").innerHTML = "";
  for (const [name, value] of [["status", body.status], ["session", run.session_id], ["input", body.input?.input_content],
                               ["content", body.content], ["waiting on", body.waiting_on], ["events", events]]) {
    if (value === undefined || value === null || value === "") continue;
    const heading = document.createElement("h3"); heading.textContent = name; heading.style.fontSize = ".85rem";
    const text = document.createElement("pre"); text.textContent = value;
    $("detail-body").append(heading, text);
  }
}

async function loadSummary() {
  const response = await api("/queue/stats");
  const summary = $("summary");
  if (!response.ok) {
    summary.classList.add("muted");
    summary.textContent = `queue summary unavailable (${response.status}; see the timeline below)`;
    return;
  }
  const stats = await response.json();
  let held = "";
  const metrics = await api("/metrics");
  if (metrics.ok) {
    const text = await metrics.text();
    const count = (reason) => Number((text.match(new RegExp(`^agentos_sessions_held\\{reason="${reason}"\\} (\\S+)`, "m")) || [])[1] || 0);
    held = ` · <span>sessions held: <b id="held">${count("paused") + count("retrying")}</b></span>`;
  }
  const oldest = stats.oldest_queued_age_seconds;
  summary.classList.remove("muted");
  summary.innerHTML = Object.entries(stats.counts).map(([status, n]) => `<span>${status}: <b data-status="${status}">${n}</b></span>`).join("")
    + ` · <span>oldest queued: <b id="oldest">${oldest === null ? "–" : `${oldest.toFixed(1)}s`}</b></span>` + held;
}
