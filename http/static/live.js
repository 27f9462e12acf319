"use strict";
// The live page: a board's top-10 over the SSE stream. The board and period come from the
// URL (?board=&period=; a match board is match:{id}), the viewer's own entry and rank from
// the stream's user.rank.updated events (shown below the top when outside it).
const params = new URLSearchParams(location.search);
const boards = JSON.parse(document.getElementById("lb-boards").textContent);
const board = params.get("board") || "global";
const period = params.get("period") || "current";
// A bearer token never travels in a URL: it is pasted into the form, kept in this tab's
// sessionStorage, and traded for a short-lived realtime token (GET /v1/realtime/token with
// an Authorization header); only that realtime token goes into the stream's URL.
let bearer = sessionStorage.getItem("lb-token") || "";
const devToken = document.querySelector('meta[name="lb-dev-token"]').content;
let source = null, lastVersion = -1, lastPeriod = "", previous = new Map(), retryDelay = 1000;
// (not "top": a global let may not shadow window.top)
let mine = null, shown = [], resetAt = null;

const $ = id => document.getElementById(id);
function setState(cls, text) { const el = $("state"); el.className = cls; el.querySelector("span").textContent = text; }

// The pickers show where the page is and move it elsewhere.
function setupPickers() {
  const sel = $("board-select");
  for (const b of boards) {
    const o = document.createElement("option");
    o.value = b.id; o.textContent = b.id + " (" + b.operator + ", " + b.order + ", " + b.period + ")";
    sel.append(o);
  }
  const [def, match] = board.split(":");
  sel.value = def;
  $("match-input").value = match || "";
  $("period-select").value = ["current", "previous"].includes(period) ? period : "current";
  if (!["current", "previous"].includes(period)) {
    const o = document.createElement("option"); o.value = period; o.textContent = period; $("period-select").append(o); $("period-select").value = period;
  }
  const showMatch = () => { $("match-label").hidden = (boards.find(b => b.id === sel.value) || {}).period !== "match"; };
  sel.addEventListener("change", showMatch); showMatch();
  $("go").addEventListener("click", () => {
    const def = boards.find(b => b.id === sel.value) || {};
    const id = def.period === "match" ? sel.value + ":" + $("match-input").value.trim() : sel.value;
    location.search = "?board=" + encodeURIComponent(id) + "&period=" + encodeURIComponent($("period-select").value);
  });
}

function row(e, cls) {
  const li = document.createElement("li");
  li.dataset.user = e.user_id;
  if (cls) li.className = cls;
  const rank = document.createElement("span"); rank.className = "rank"; rank.textContent = "#" + e.rank;
  const who = document.createElement("span"); who.className = "who";
  const name = document.createElement("b"); name.textContent = e.nick_name || e.user_id;
  const id = document.createElement("span"); id.textContent = e.nick_name ? e.user_id : "";
  who.append(name, id);
  const score = document.createElement("span"); score.className = "score"; score.textContent = e.score.toLocaleString();
  li.append(rank, who, score);
  return li;
}

function render(snap) {
  // A new period (a reset) starts over; within a period versions only go forward.
  if (snap.period === lastPeriod && snap.version < lastVersion) return;
  if (snap.period !== lastPeriod) mine = null;
  lastVersion = snap.version; lastPeriod = snap.period; shown = snap.entries;
  resetAt = snap.next_reset_at ? new Date(snap.next_reset_at) : null;
  $("board").textContent = snap.board; $("period").textContent = snap.period;
  const list = $("top");
  list.textContent = "";
  if (!snap.entries.length) { const li = document.createElement("li"); li.className = "empty"; li.textContent = "No scores yet."; list.append(li); }
  const now = new Map();
  for (const e of snap.entries) {
    const li = row(e, mine && mine.user_id === e.user_id ? "me" : "");
    const before = previous.get(e.user_id);
    if (previous.size && (!before || before.score !== e.score || before.rank !== e.rank)) { li.classList.add("changed"); setTimeout(() => li.classList.remove("changed"), 50); }
    now.set(e.user_id, e);
    list.append(li);
  }
  previous = now;
  renderMine();
  $("version").textContent = "version " + snap.version;
  // When the top last changed, not when this page received it.
  $("updated").textContent = snap.updated_at ? "updated " + new Date(snap.updated_at).toLocaleTimeString() : "";
  tick();
}

// renderMine highlights the viewer's entry in the top, or shows it below when outside it.
function renderMine() {
  const list = $("mine");
  list.textContent = "";
  for (const li of $("top").children) li.classList.toggle("me", !!mine && li.dataset.user === mine.user_id);
  if (!mine) { $("me").textContent = ""; return; }
  $("me").textContent = "You (" + mine.user_id + "): " + mine.score.toLocaleString() + " points, rank #" + mine.rank;
  if (!shown.some(e => e.user_id === mine.user_id)) list.append(row(mine, "me outside"));
}

// tick shows the time to the next reset.
function tick() {
  if (!resetAt) { $("reset").textContent = ""; return; }
  const s = Math.max(0, Math.round((resetAt - Date.now()) / 1000));
  const h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), sec = s % 60;
  $("reset").textContent = "resets in " + (h ? h + "h " : "") + String(m).padStart(2, "0") + "m " + String(sec).padStart(2, "0") + "s";
}
setInterval(tick, 1000);

async function realtimeToken() {
  const r = await fetch("/v1/realtime/token", { headers: { Authorization: "Bearer " + bearer } });
  if (r.status === 401) { sessionStorage.removeItem("lb-token"); bearer = ""; throw new Error("unauthorized"); }
  if (!r.ok) throw new Error("token: " + r.status);
  return (await r.json()).token;
}

async function connect() {
  if (!bearer && !devToken) { $("auth").hidden = false; setState("offline", "token needed"); return; }
  $("auth").hidden = true;
  setState("connecting", "connecting…");
  let token;
  if (!bearer) { // development secret: the server handed the page a viewer token
    if (source) { location.reload(); return; } // it expired: a reload brings a fresh one
    token = devToken;
  } else try { token = await realtimeToken(); } catch (err) {
    if (!bearer) { $("auth").hidden = false; setState("offline", "token rejected"); return; }
    setState("offline", "offline, retrying"); setTimeout(connect, retryDelay); retryDelay = Math.min(retryDelay * 2, 15000); return;
  }
  const q = "board=" + encodeURIComponent(board) + (period === "current" ? "" : "&period=" + encodeURIComponent(period));
  source = new EventSource("/v1/realtime/leaderboard?" + q + "&token=" + encodeURIComponent(token));
  source.onopen = () => { setState("live", "live"); retryDelay = 1000; };
  source.addEventListener("leaderboard.updated", ev => render(JSON.parse(ev.data)));
  source.addEventListener("user.rank.updated", ev => {
    const u = JSON.parse(ev.data);
    if (u.period !== lastPeriod && lastPeriod !== "") return;
    mine = { user_id: u.user_id, score: u.score, rank: u.rank, nick_name: "" };
    renderMine();
  });
  source.addEventListener("user.rank.removed", ev => { // removed by an admin, or hidden by a ban
    const u = JSON.parse(ev.data);
    if (u.period !== lastPeriod && lastPeriod !== "") return;
    mine = null;
    renderMine();
  });
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) { // refused (e.g. expired token): get a new token
      if (bearer) source = null;
      setState("offline", "reconnecting…"); setTimeout(connect, retryDelay); retryDelay = Math.min(retryDelay * 2, 15000);
    } else { setState("connecting", "reconnecting…"); }
  };
}

$("auth").addEventListener("submit", ev => {
  ev.preventDefault();
  bearer = $("token").value.trim();
  sessionStorage.setItem("lb-token", bearer);
  connect();
});
setupPickers();
connect();
