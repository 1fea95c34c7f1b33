"use strict";
// Everything this page needs is served by agentos itself. What it shows:
// - the runs of the queue, whoever submitted them (GET /queue/jobs: every LIST_EVERY ms the live ones, up to 100,
//   every RECENT_EVERY ms the 50 most recent ones; nothing while the tab is hidden), and the ones submitted from
//   this page (the only ones when /queue refuses: the page says why);
// - each run's details from its poll, fetched when the list or its stream shows it changed (POLLS_AT_ONCE at most
//   in flight);
// - running runs followed by their event streams (POST .../resume, read with fetch so the bearer token can be
//   sent), MAX_STREAMS at once; a stream that closes before its run ended is resumed after a back-off.
const MAX_STREAMS = 4;          // browsers open at most 6 connections to one origin
const POLLS_AT_ONCE = 2;
const LIST_EVERY = 2000;        // the live runs and the queue summary
const RECENT_EVERY = 10000;     // the most recent runs, which catches those that ended between two looks
const UNAVAILABLE_EVERY = 10000;
const RESUME_BACKOFF = [1000, 30000];  // shortest and longest wait before resuming a stream that closed early
const LIVE_JOBS = "/queue/jobs?status=queued&status=running&status=paused&limit=100&sort_by=created_at&sort_order=asc";
const RECENT_JOBS = "/queue/jobs?limit=50&sort_by=created_at&sort_order=desc";
const FINISHED = new Set(["COMPLETED", "ERROR", "CANCELLED"]);
const RUN_STATUS = {queued: "PENDING", running: "RUNNING", paused: "PAUSED", completed: "COMPLETED", failed: "ERROR",
                    cancelled: "CANCELLED"};
const runs = new Map();         // run_id -> {run_id, session_id, kind, component, label, accepted, body, job, ...}
const sessions = [];            // session ids in the order they first appeared
const polls = [];               // runs waiting for a poll
let polling = 0;
let streams = 0;
let listed = false;             // whether /queue/jobs answered last time
let lastRecent = 0;

const $ = (id) => document.getElementById(id);
const now = () => Date.now() / 1000;
const windowSeconds = () => Number($("window").value);  // runs that ended longer ago leave the timeline
$("window").value = localStorage.getItem("agentos-window") || "300";
$("window").addEventListener("change", () => {
  localStorage.setItem("agentos-window", $("window").value);
  lastRecent = 0;
  tick();
});
$("token").value = localStorage.getItem("agentos-token") || "";
$("token").addEventListener("change", () => {
  localStorage.setItem("agentos-token", $("token").value);
  if (!$("component").options.length) loadComponents();
  lastRecent = 0;
  tick();
});

function headers(extra = {}) {
  const token = $("token").value.trim();
  return token ? {...extra, Authorization: `Bearer ${token}`} : extra;
}

async function api(path, options = {}) {
  return fetch(path, {...options, headers: headers(options.headers)});
}

function complain(what, response) {
  if (response.status === 401 || response.status === 403) {
    $("problem").textContent = `${what}: ${response.status}; set the bearer token`;
  }
}

function form(fields) {
  const body = new URLSearchParams();
  for (const [key, value] of Object.entries(fields)) body.append(key, value);
  return body;
}

function prefix(run) { return `/${run.kind}s/${encodeURIComponent(run.component)}/runs/${run.run_id}`; }

async function loadComponents() {
  const response = await api("/config");
  if (!response.ok) { complain("/config", response); return; }
  $("problem").textContent = "";
  const config = await response.json();
  for (const kind of ["agent", "team", "workflow"]) {
    for (const component of config[`${kind}s`] || []) {
      const option = new Option(`${component.id} (${kind})`, `${kind}:${component.id}`);
      $("component").add(option);
    }
  }
}

$("submit").addEventListener("submit", async (event) => {
  event.preventDefault();
  const [kind, component] = $("component").value.split(":");
  const session = $("session").value.trim();
  const message = $("message").value;
  const accepted = now();
  const response = await api(`/${kind}s/${encodeURIComponent(component)}/runs`, {
    method: "POST", body: form({message, session_id: session, background: "true", stream: "false"}),
  });
  const answer = await response.json();
  if (response.status !== 202) { $("problem").textContent = `submit: ${response.status} ${JSON.stringify(answer.detail)}`; return; }
  $("problem").textContent = "";
  const run = track({run_id: answer.run_id, session_id: answer.session_id, kind, component, label: message, accepted,
                     body: {status: answer.status}});
  run.accepted = accepted;  // the list may have shown it first, with its time to the second
  draw();
});

function track(run) {
  const known = runs.get(run.run_id);
  if (known) return known;
  runs.set(run.run_id, {...run, lastIndex: -1, backoff: 0});
  if (!sessions.includes(run.session_id)) sessions.push(run.session_id);
  poll(runs.get(run.run_id));
  return runs.get(run.run_id);
}

// The queue's runs, whoever submitted them. A run is polled when it is first seen, when its ticket shows a status
// its poll did not or a new attempt, and when it leaves the live list unfinished; the waiting runs of a session
// are polled when another of its runs changes status (what they wait on may have).
async function tick() {
  clearTimeout(tick.timer);
  try {
    if (!document.hidden) await look();
  } catch (error) {
    listed = false;
    $("list-problem").textContent = `Only runs submitted from this page are shown: /queue/jobs did not answer (${error}).`;
  } finally {
    clearTimeout(tick.timer);
    tick.timer = setTimeout(tick, listed ? LIST_EVERY : UNAVAILABLE_EVERY);
  }
}

async function look() {
  const recent = Date.now() - lastRecent >= RECENT_EVERY;
  const timeout = {signal: AbortSignal.timeout(LIST_EVERY * 5)};
  const [live, latest] = await Promise.all([api(LIVE_JOBS, timeout), recent ? api(RECENT_JOBS, timeout) : null]);
  loadSummary();
  const refused = [live, latest].find((response) => response && !response.ok);
  if (refused) { await unlisted(refused); return; }
  listed = true;
  $("list-problem").textContent = "";
  const {data: jobs, meta} = await live.json();
  const liveIds = meta.total_count <= jobs.length ? new Set(jobs.map((job) => job.id)) : null;  // null: not all
  if (latest) { lastRecent = Date.now(); jobs.push(...(await latest.json()).data); }
  jobs.sort((a, b) => a.created_at - b.created_at);
  for (const job of jobs) see(job);
  for (const run of runs.values()) {
    if (liveIds && run.job && !liveIds.has(run.run_id) && ["queued", "running", "paused"].includes(run.job.status)) {
      run.job = {...run.job, status: "left"};  // it ended between two looks, or was pruned
      if (!FINISHED.has(run.body.status)) changed(run);
    }
  }
  draw();
}

function see(job) {
  const status = RUN_STATUS[job.status];
  let run = runs.get(job.id);
  if (!run) {
    if (FINISHED.has(status) && (job.completed_at || job.updated_at) < now() - windowSeconds()) return;
    run = track({run_id: job.id, session_id: job.session_id, kind: job.component_type, component: job.component_id,
                 label: job.payload?.input ?? job.payload?.message ?? job.id, accepted: job.created_at, body: {status},
                 endedBy: job.completed_at});
    run.job = job;
    return;
  }
  const before = run.job;
  run.job = job;
  const moved = before?.status !== job.status && RUN_STATUS[job.status] !== run.body.status;
  if (!before || moved || before.attempt !== job.attempt) changed(run);
}

function changed(run) {  // a new leg or attempt: its stream may be resumed at once
  clearTimeout(run.resumeTimer);
  run.resuming = false;
  run.backoff = 0;
  poll(run);
}

async function unlisted(response) {
  listed = false;
  let detail = "";
  try { detail = (await response.json()).detail || ""; } catch (error) { /* not JSON */ }
  const why = {
    401: "the list needs a bearer token: type AGENTOS_ADMIN_TOKEN (or, when no admin token is set, AGENTOS_SECURITY_KEY) above",
    403: `${detail}: the list needs AGENTOS_ADMIN_TOKEN (or, when no admin token is set, AGENTOS_SECURITY_KEY)`,
    503: "the durable queue is off (AGENTOS_QUEUE_DURABLE=false), so there is no queue to list",
  }[response.status] || `/queue/jobs answered ${response.status} ${detail}`;
  $("list-problem").textContent = `Only runs submitted from this page are shown: ${why}.`;
  draw();
}

// Polls wanted while one of the same run waits or is on its way make one more, after it: a burst of events
// costs two polls.
function poll(run) {
  if (run.polling) { run.pollAgain = true; return; }
  if (run.pollWanted) return;
  run.pollWanted = true;
  polls.push(run);
  pollNext();
}

function pollNext() {
  while (polling < POLLS_AT_ONCE && polls.length) {
    const run = polls.shift();
    run.pollWanted = false;
    run.polling = true;
    polling += 1;
    refresh(run).finally(() => {
      polling -= 1; run.polling = false;
      if (run.pollAgain) { run.pollAgain = false; poll(run); }
      pollNext();
    });
  }
}

async function refresh(run) {
  const response = await api(`${prefix(run)}?session_id=${encodeURIComponent(run.session_id)}`);
  if (!response.ok) { complain("poll", response); return; }
  const before = run.body.status;
  run.body = await response.json();
  if (run.body.status !== before) {
    for (const other of runs.values()) {
      if (other.session_id === run.session_id && other.body.status === "PENDING" && other !== run) poll(other);
    }
  }
  draw();
  if (run.run_id === shown) showDetail(run);
  follow(run);
}

// Follow a running run by its stream while a slot is free; the list keeps the others current. A stream that
// closes while its run goes on (a web process restarting, a client fallen behind) is resumed from the last event
// seen: a second later when it brought news, else after a wait that doubles, up to 30 s.
async function follow(run) {
  if (run.streaming || run.resuming || run.body.status !== "RUNNING") return;
  if (streams >= MAX_STREAMS) return;
  streams += 1; run.streaming = true;
  let news = false;
  try {
    const response = await api(`${prefix(run)}/resume`, {
      method: "POST", body: form({session_id: run.session_id, last_event_index: String(run.lastIndex)}),
    });
    if (!response.ok || !response.body) throw new Error(`resume ${response.status}`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end); buffer = buffer.slice(end + 2);
        const name = (frame.match(/^event: (.*)$/m) || [])[1];
        const data = (frame.match(/^data: (.*)$/m) || [])[1];
        const index = data ? JSON.parse(data).event_index ?? -1 : -1;  // meta frames (catch_up, replay...) have none
        if (index > run.lastIndex) { run.lastIndex = index; news = true; }
        if (index >= 0 && name !== "RunContent" && name !== "TeamRunContent") poll(run);
      }
    }
  } catch (error) {
    // resumed below, after the back-off
  } finally {
    streams -= 1; run.streaming = false;
  }
  // Polled now for its status (which its database row may tell a moment after its last event), and resumed after
  // the wait if it still runs then.
  run.backoff = news ? RESUME_BACKOFF[0] : Math.min(RESUME_BACKOFF[1], Math.max(RESUME_BACKOFF[0], 2 * run.backoff));
  run.resuming = true;
  poll(run);
  run.resumeTimer = setTimeout(() => {
    run.resuming = false;
    if (run.body.status === "RUNNING") poll(run);
  }, run.backoff);
  followNext();
}

function followNext() {
  for (const run of runs.values()) {
    if (streams >= MAX_STREAMS) return;
    follow(run);
  }
}
