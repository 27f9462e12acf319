"use strict";
const params = new URLSearchParams(location.search);
const board = params.get("board") || "global";
document.getElementById("board").textContent = board;
// A bearer token never travels in a URL: it is pasted into the form, kept in this tab's
// sessionStorage, and traded for a short-lived realtime token (GET /v1/realtime/token with
// an Authorization header); only that realtime token goes into the stream's URL.
let bearer = sessionStorage.getItem("lb-token") || "";
const devToken = document.querySelector('meta[name="lb-dev-token"]').content;
let source = null, lastVersion = 0, previous = new Map(), retryDelay = 1000;

function setState(cls, text) { const el = document.getElementById("state"); el.className = cls; el.querySelector("span").textContent = text; }

function render(snap) {
  if (snap.version < lastVersion) return; // never go back in version
  lastVersion = snap.version;
  const list = document.getElementById("top");
  list.textContent = "";
  if (!snap.entries.length) { const li = document.createElement("li"); li.className = "empty"; li.textContent = "No scores yet."; list.append(li); }
  const now = new Map();
  for (const e of snap.entries) {
    const li = document.createElement("li");
    li.dataset.user = e.user_id;
    const rank = document.createElement("span"); rank.className = "rank"; rank.textContent = "#" + e.rank;
    const who = document.createElement("span"); who.className = "who";
    const name = document.createElement("b"); name.textContent = e.nick_name || e.user_id;
    const id = document.createElement("span"); id.textContent = e.nick_name ? e.user_id : "";
    who.append(name, id);
    const score = document.createElement("span"); score.className = "score"; score.textContent = e.score.toLocaleString();
    li.append(rank, who, score);
    const before = previous.get(e.user_id);
    if (previous.size && (!before || before.score !== e.score || before.rank !== e.rank)) { li.classList.add("changed"); setTimeout(() => li.classList.remove("changed"), 50); }
    now.set(e.user_id, e);
    list.append(li);
  }
  previous = now;
  document.getElementById("version").textContent = "version " + snap.version;
  document.getElementById("updated").textContent = "updated " + new Date(snap.ts).toLocaleTimeString();
}

async function realtimeToken() {
  const r = await fetch("/v1/realtime/token", { headers: { Authorization: "Bearer " + bearer } });
  if (r.status === 401) { sessionStorage.removeItem("lb-token"); bearer = ""; throw new Error("unauthorized"); }
  if (!r.ok) throw new Error("token: " + r.status);
  return (await r.json()).token;
}

async function connect() {
  if (!bearer && !devToken) { document.getElementById("auth").hidden = false; setState("offline", "token needed"); return; }
  document.getElementById("auth").hidden = true;
  setState("connecting", "connecting…");
  let token;
  if (!bearer) { // development secret: the server handed the page a viewer token
    if (source) { location.reload(); return; } // it expired: a reload brings a fresh one
    token = devToken;
  } else try { token = await realtimeToken(); } catch (err) {
    if (!bearer) { document.getElementById("auth").hidden = false; setState("offline", "token rejected"); return; }
    setState("offline", "offline, retrying"); setTimeout(connect, retryDelay); retryDelay = Math.min(retryDelay * 2, 15000); return;
  }
  source = new EventSource("/v1/realtime/leaderboard?board=" + encodeURIComponent(board) + "&token=" + encodeURIComponent(token));
  source.onopen = () => { setState("live", "live"); retryDelay = 1000; };
  source.addEventListener("leaderboard.updated", ev => render(JSON.parse(ev.data)));
  source.addEventListener("user.rank.updated", ev => {
    const u = JSON.parse(ev.data);
    document.getElementById("me").textContent = "You (" + u.user_id + "): " + u.score.toLocaleString() + " points, rank #" + u.rank;
  });
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) { // refused (e.g. expired token): get a new token
      if (bearer) source = null;
      setState("offline", "reconnecting…"); setTimeout(connect, retryDelay); retryDelay = Math.min(retryDelay * 2, 15000);
    } else { setState("connecting", "reconnecting…"); }
  };
}

document.getElementById("auth").addEventListener("submit", ev => {
  ev.preventDefault();
  bearer = document.getElementById("token").value.trim();
  sessionStorage.setItem("lb-token", bearer);
  connect();
});
connect();
