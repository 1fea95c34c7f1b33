"use strict";
// Everything this page needs is served by agentos itself. Runs are followed by their event streams (POST .../resume,
// read with fetch so the bearer token can be sent); a run without a free stream slot is polled instead.
const MAX_STREAMS = 4;          // browsers open at most 6 connections to one origin
const FINISHED = new Set(["COMPLETED", "ERROR", "CANCELLED"]);
const runs = new Map();         // run_id -> {run_id, session_id, kind, component, label, accepted, body, streaming}
const sessions = [];            // session ids in the order they first appeared
let streams = 0;
let t0 = null;

const $ = (id) => document.getElementById(id);
$("token").value = localStorage.getItem("agentos-token") || "";
$("token").addEventListener("change", () => localStorage.setItem("agentos-token", $("token").value));

function headers(extra = {}) {
  const token = $("token").value.trim();
  return token ? {...extra, Authorization: `Bearer ${token}`} : extra;
}

async function api(path, options = {}) {
  const response = await fetch(path, {...options, headers: headers(options.headers)});
  if (response.status === 401 || response.status === 403) {
    $("problem").textContent = `${path.split("?")[0]}: ${response.status}; set the bearer token`;
  }
  return response;
}

function form(fields) {
  const body = new URLSearchParams();
  for (const [key, value] of Object.entries(fields)) body.append(key, value);
  return body;
}

function prefix(run) { return `/${run.kind}s/${encodeURIComponent(run.component)}/runs/${run.run_id}`; }

async function loadComponents() {
  const response = await api("/config");
  if (!response.ok) return;
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
  const accepted = Date.now() / 1000;
  const response = await api(`/${kind}s/${encodeURIComponent(component)}/runs`, {
    method: "POST", body: form({message, session_id: session, background: "true", stream: "false"}),
  });
  const answer = await response.json();
  if (response.status !== 202) { $("problem").textContent = `submit: ${response.status} ${JSON.stringify(answer.detail)}`; return; }
  $("problem").textContent = "";
  track({run_id: answer.run_id, session_id: answer.session_id, kind, component, label: message, accepted,
         body: {status: answer.status}});
});

function track(run) {
  if (t0 === null) t0 = run.accepted;
  runs.set(run.run_id, run);
  if (!sessions.includes(run.session_id)) sessions.push(run.session_id);
  refresh(run);
  follow(run);
  draw();
}

async function refresh(run) {
  const response = await api(`${prefix(run)}?session_id=${encodeURIComponent(run.session_id)}`);
  if (!response.ok) return;
  const before = run.body.status;
  run.body = await response.json();
  draw();
  if (run.run_id === shown) showDetail(run);
  if (before !== run.body.status) loadSummary();
}

// Follow a run by its stream; without a free slot, poll it until one frees.
async function follow(run) {
  if (FINISHED.has(run.body.status)) return;
  if (streams >= MAX_STREAMS) { setTimeout(() => { refresh(run).then(() => follow(run)); }, 700); return; }
  streams += 1; run.streaming = true;
  try {
    const response = await api(`${prefix(run)}/resume`, {
      method: "POST", body: form({session_id: run.session_id, last_event_index: "-1"}),
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
        if (name && name !== "RunContent" && name !== "TeamRunContent") refresh(run);
      }
    }
  } catch (error) {
    // fall back to polling below
  } finally {
    streams -= 1; run.streaming = false;
  }
  await refresh(run);
  if (!FINISHED.has(run.body.status) && run.body.status !== "PAUSED") setTimeout(() => follow(run), 500);
}
