const seconds = (iso) => iso ? Date.parse(iso) / 1000 : null;

function span(run) {
  const body = run.body || {};
  const now = Date.now() / 1000;
  const started = seconds(body.started_at);
  const ended = seconds(body.completed_at);
  if (!started) return {from: run.accepted, to: now, waiting: true};
  if (body.status === "PAUSED") return {from: started, to: now, waiting: false};
  return {from: started, to: ended || now, waiting: false};
}

function draw() {
  $("empty")?.remove();
  const now = Date.now() / 1000;
  const width = Math.max(10, now - t0 + 1);
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
  for (const run of runs.values()) {
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
    bar.className = `bar ${status}`;
    bar.dataset.status = status;
    bar.dataset.start = waiting ? "" : String(from);
    bar.dataset.end = FINISHED.has(status) ? String(to) : "";
    bar.style.left = `${(100 * (from - t0)) / width}%`;
    bar.style.width = `${(100 * (to - from)) / width}%`;
    const waitingOn = run.body.waiting_on ? ` · waiting on ${run.body.waiting_on.slice(0, 8)}` : "";
    const text = status === "PAUSED" ? `${run.label} · holds ${run.session_id}` : `${run.label}${waiting ? waitingOn : ""}`;
    bar.title = `${run.run_id} ${status}${waitingOn}`;
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
  const axis = $("axis");
  axis.innerHTML = "";
  const step = width > 120 ? 30 : width > 40 ? 10 : width > 15 ? 5 : 1;
  for (let s = 0; s <= width; s += step) {
    const tick = document.createElement("span");
    tick.style.left = `${(100 * s) / width}%`; tick.textContent = `${s}s`;
    axis.append(tick);
  }
}

async function continueRun(run) {
  const tools = (run.body.tools || []).map((tool) => ({...tool, confirmed: true}));
  const response = await api(`${prefix(run)}/continue`, {
    method: "POST", body: form({session_id: run.session_id, tools: JSON.stringify(tools), background: "true", stream: "false"}),
  });
  if (response.status !== 202) { $("problem").textContent = `continue: ${response.status}`; return; }
  await refresh(run);
  follow(run);
}

async function cancelRun(run) {
  await api(`${prefix(run)}/cancel?session_id=${encodeURIComponent(run.session_id)}`, {method: "POST"});
  await refresh(run);
  follow(run);
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
  if (!response.ok) { summary.textContent = `queue summary unavailable (${response.status})`; return; }
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
