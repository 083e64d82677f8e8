// The player demo page: lists dungeons, shows a boss from its frames (DESIGN 8, README "Frames, for
// gateways in any language") and sends join/attack/leave with request IDs (README "Commands, for
// gateways in any language"), talking NATS over WebSocket to the server (nats.js).
import { Conn, parseCreds } from "./nats.js";
import { decode } from "./msgpack.js";
import { fnv1a32, FrameFilter, Holdback, Rewinds } from "./wire.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const dec = new TextDecoder();
const session = Array.from(crypto.getRandomValues(new Uint8Array(4)), (x) => x.toString(16).padStart(2, "0")).join("");
let seq = 0;

let cfg = null;
let nc = null;
const known = new Map(); // dungeon ID → {fromConfig, seen}
let current = null; // {id, shard, subs, filter, rewinds or hold (durable display), counts, last frame's arrival}
const STORED_TOKEN = "~stored"; // the last token of an instance's stored notices (wire.StoredToken)
const shown = []; // the last 100 frames shown, token@tick:hp (? if speculative), for the test and the console

const shardOf = (id) => fnv1a32(id) % cfg.shards;

function stampOf(msg) {
  const num = (k, dflt) => {
    const v = msg.headers.get(k);
    if (v === undefined || v === "") {
      if (dflt !== undefined) return dflt;
      throw new Error(`frame without ${k}`);
    }
    if (!/^\d+$/.test(v)) throw new Error(`frame with a bad ${k}: ${v}`);
    return BigInt(v);
  };
  const tick = num("tickfence-tick");
  return {
    epoch: num("tickfence-epoch"), token: num("tickfence-token"), tick, index: num("tickfence-frame", 0n),
    // The dungeon's stored tick when the frame left (a node without the header: the frame's own).
    stored: num("tickfence-stored", tick), reverts: num("tickfence-reverts", 0n),
  };
}

// noticeOf reads a stored notice (tickfence.out.<S>.<id>.~stored): no tick, no payload.
function noticeOf(msg) {
  const num = (k, dflt) => {
    const v = msg.headers.get(k);
    if ((v === undefined || v === "") && dflt !== undefined) return dflt;
    if (!/^\d+$/.test(v || "")) throw new Error(`stored notice without a valid ${k}`);
    return BigInt(v);
  };
  return { epoch: num("tickfence-epoch"), token: num("tickfence-token"), stored: num("tickfence-stored"), reverts: num("tickfence-reverts", 0n) };
}

let wasDown = false;
function setConn(state, detail) {
  if (state === "disconnected" && !wasDown) {
    wasDown = true;
    note(`NATS connection lost (${detail}); reconnecting`);
  } else if (state === "connected" && wasDown) {
    wasDown = false;
    note(`reconnected to ${detail}; subscriptions made again`);
  }
  const el = $("conn");
  el.dataset.state = state;
  el.textContent = state === "connected" ? `connected · ${detail}` : `${state}${detail ? " · " + detail : ""}`;
}

function note(text) {
  const li = document.createElement("li");
  li.className = "note";
  li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  $("log").prepend(li);
}

// ---- the dungeon list ----

function naturalCompare(a, b) {
  return a.localeCompare(b, undefined, { numeric: true });
}

function renderList() {
  const ul = $("list");
  ul.replaceChildren();
  for (const id of [...known.keys()].sort(naturalCompare)) {
    const li = document.createElement("li");
    const b = document.createElement("button");
    b.type = "button";
    b.dataset.id = id;
    b.textContent = id;
    if (known.get(id).seen) {
      const s = document.createElement("span");
      s.className = "seen";
      s.textContent = "live";
      b.append(s);
    }
    if (current && current.id === id) b.classList.add("selected");
    b.onclick = () => select(id);
    li.append(b);
    ul.append(li);
  }
}

function addKnown(id, how) {
  const k = known.get(id) || { fromConfig: false, seen: false };
  const changed = !known.has(id) || (how === "seen" && !k.seen);
  if (how === "config") k.fromConfig = true;
  else k.seen = true;
  known.set(id, k);
  return changed;
}

// rescan listens to every instance's frames for 2 s and lists the IDs it sees.
function rescan() {
  const sub = nc.subscribe("tickfence.out.>", (m) => {
    // Only a frame lists its instance: a message without a frame's stamp is not a node's frame
    // (a player can aim a command's answer at any subject of the players' account).
    try {
      stampOf(m);
    } catch {
      return;
    }
    const t = m.subject.split(".");
    if (t.length >= 4 && addKnown(t[3], "seen")) scheduleRender();
  });
  setTimeout(() => sub.unsubscribe(), 2000);
}
let renderTimer = 0;
function scheduleRender() {
  if (!renderTimer) renderTimer = setTimeout(() => ((renderTimer = 0), renderList()), 200);
}

// ---- one dungeon's frames ----

function select(id) {
  if (current) current.subs.forEach((s) => s.unsubscribe());
  const shard = shardOf(id);
  const durable = $("durable").checked;
  current = {
    id, shard, subs: [], filter: new FrameFilter(), durable, rewinds: new Rewinds(), hold: new Holdback(),
    frames: 0, dropped: 0, rewound: 0, lastAt: 0, token: null,
  };
  const boss = $("boss");
  boss.dataset.id = id;
  for (const k of ["hp", "maxHp", "phase", "tick", "stored", "speculative", "epoch", "token", "run", "rewinds"]) delete boss.dataset[k];
  boss.dataset.display = durable ? "durable" : "fast";
  $("boss-name").textContent = `${id} · shard ${shard}`;
  $("hp-fill").style.width = "0";
  $("hp-text").textContent = "waiting for a frame…";
  for (const k of ["phase", "run", "tick", "stored", "grant", "frames"]) $(k).textContent = "–";
  $("players").tBodies[0].replaceChildren();
  const base = `tickfence.out.${shard}.${id}`;
  const cur = current;
  const onFrame = (m) => frame(cur, m, base);
  cur.subs.push(nc.subscribe(base, onFrame), nc.subscribe(base + ".>", onFrame));
  const u = new URL(location.href);
  u.searchParams.set("id", id);
  if (durable) u.searchParams.set("durable", "1");
  else u.searchParams.delete("durable");
  history.replaceState(null, "", u);
  renderList();
}

// frame takes a message of the selected dungeon: a frame, or a stored notice. The fast display
// shows every frame that passes the watcher's rule at once, marks one past the stored tick as
// speculative, and says when a failover undid frames it showed (Rewinds); the durable display
// holds each until a later frame or notice says its tick is stored (Holdback).
function frame(cur, m, base) {
  if (cur !== current) return;
  const topic = m.subject.length > base.length ? m.subject.slice(base.length + 1) : "";
  if (topic === STORED_TOKEN) {
    if (!cur.durable) return; // the fast display needs no notice
    let n;
    try {
      n = noticeOf(m);
    } catch (e) {
      console.warn(e.message);
      return;
    }
    release(cur, cur.hold.notice(n));
    return;
  }
  let st;
  try {
    st = stampOf(m);
  } catch (e) {
    cur.dropped++;
    console.warn(e.message);
    return;
  }
  if (!cur.filter.pass(topic, st)) {
    cur.dropped++;
    counts(cur);
    return;
  }
  cur.lastAt = performance.now(); // the dungeon is live, whether or not the frame is shown yet
  if (cur.durable) release(cur, cur.hold.frame(st, { st, topic, data: m.data }));
  else display(cur, { st, topic, data: m.data }, cur.rewinds.shown(st));
}

// release shows the frames the durable display's Holdback released, oldest first.
function release(cur, h) {
  h.released.forEach((fr, i) => display(cur, fr, i === 0 && h.rewound));
  counts(cur);
}

function counts(cur) {
  const held = cur.durable ? `, ${cur.hold.held.length} waiting to be stored` : "";
  $("frames").textContent = `${cur.frames} shown, ${cur.dropped} dropped${held}`;
}

// display shows a frame (rewound: frames before it were undone).
function display(cur, fr, rewound) {
  const { st, topic } = fr;
  cur.frames++;
  if (cur.token !== null && cur.token !== st.token) {
    note(`${cur.id}: frames now under token ${st.token} (was ${cur.token}): a new grant — the shard moved (a failover or a hand-off), or its owner rotated its token (after a reconnect)`);
  }
  if (rewound) {
    cur.rewound++;
    $("boss").dataset.rewinds = String(cur.rewound);
    note(cur.durable
      ? `${cur.id}: rewind — the frames past tick ${st.stored} were undone before they were stored (the dungeon went on from its stored tick ${st.stored}); the durable display never showed them`
      : `${cur.id}: rewind — the frames shown past tick ${st.stored} were undone (the dungeon went on from its stored tick ${st.stored}, e.g. after a failover): what they showed did not happen; showing tick ${st.tick}`);
  }
  cur.token = st.token;
  counts(cur);
  if (topic !== "") return; // the dungeon publishes only on its main subject
  let f;
  try {
    f = decode(fr.data);
  } catch (e) {
    console.warn(`frame of ${cur.id}: ${e.message}`);
    return;
  }
  show(cur, st, f);
}

function show(cur, st, f) {
  const boss = $("boss");
  const hp = Number(f.hp), max = Number(f.max_hp) || 1;
  // Speculative: past the stored tick, what the frame shows may yet be undone by a failover.
  const speculative = st.tick > st.stored && !cur.durable;
  Object.assign(boss.dataset, { hp, maxHp: max, phase: f.phase, tick: String(st.tick), stored: String(st.stored), speculative,
    epoch: String(st.epoch), token: String(st.token), run: f.run });
  shown.push(`${st.token}@${st.tick}:${hp}${speculative ? "?" : ""}`);
  if (shown.length > 100) shown.shift();
  $("hp-fill").style.width = `${Math.max(0, Math.min(100, (100 * hp) / max))}%`;
  $("hp-text").textContent = `${hp.toLocaleString("en")} / ${max.toLocaleString("en")} HP`;
  $("phase").textContent = f.phase === "1" || f.phase === "2" ? `phase ${f.phase}` : f.phase;
  $("run").textContent = f.run;
  $("tick").textContent = String(st.tick);
  $("stored").textContent = cur.durable ? `${st.stored} · durable display` :
    speculative ? `${st.stored} · ${st.tick - st.stored} tick${st.tick - st.stored === 1n ? "" : "s"} speculative` : `${st.stored} · stored`;
  $("grant").textContent = `epoch ${st.epoch} · token ${st.token}`;
  const tb = $("players").tBodies[0];
  tb.replaceChildren();
  for (const p of f.players || []) {
    const tr = document.createElement("tr");
    for (const v of [p.name, p.hp, p.damage]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.append(td);
    }
    tb.append(tr);
  }
}

setInterval(() => {
  const el = $("liveness");
  if (!current) return;
  if (!current.lastAt) {
    el.textContent = "no frame yet (is the dungeon running, and tickd's --demo-frame-every above 0?)";
    el.classList.add("stale");
    return;
  }
  const age = (performance.now() - current.lastAt) / 1000;
  if (age > 1.5) {
    el.textContent = `no frame for ${age.toFixed(1)} s: its node may be gone; its shard fails over to another node within a few seconds`;
    el.classList.add("stale");
  } else {
    el.textContent = "live";
    el.classList.remove("stale");
  }
}, 250);

// ---- commands ----

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const RETRYABLE = new Set(["retry", "not_owner", "busy", "rate_limited"]);
let asPlayer = ""; // the player of a player's credential: its commands go on its own subject

// command sends {type, player} to the selected dungeon, with one request ID for every attempt:
// on "retry", "not_owner", "busy", no answer in time or nobody subscribed (the shard between
// owners) it sends the same command again with the same ID, so it is applied at most once.
async function command(type) {
  if (!current) return null;
  const player = $("player").value.trim();
  const id = current.id;
  const rid = `web-${session}-${++seq}`;
  const li = document.createElement("li");
  li.dataset.type = type;
  li.dataset.rid = rid;
  li.dataset.state = "pending";
  li.innerHTML = `<span class="what"></span> <span class="res"></span>`;
  li.querySelector(".what").textContent = `${new Date().toLocaleTimeString()} ${type} ${id} as ${player} · ${rid}`;
  const res = li.querySelector(".res");
  res.textContent = "…";
  $("log").prepend(li);
  // A player's credential sends on its own subject (the server lets it use no other: DESIGN 9);
  // without credentials, or with a trusted gateway's, on the trusted senders' subject.
  const subject = asPlayer ? `tickfence.play.${shardOf(id)}.${id}.${asPlayer}` : `tickfence.cmd.${shardOf(id)}.${id}`;
  const body = JSON.stringify({ type, player });
  const started = performance.now();
  let backoff = 100, attempt = 0, why = "";
  for (;;) {
    attempt++;
    li.dataset.attempts = attempt;
    try {
      const m = await nc.request(subject, body, {
        headers: { "Tickfence-Request-Id": rid, "Content-Type": "application/json" }, timeout: 2000,
      });
      const r = JSON.parse(dec.decode(m.data));
      if (r.ok) {
        li.dataset.state = "ok";
        const ms = Math.round(performance.now() - started);
        res.textContent = `ok ${JSON.stringify(r.result)} · ${ms} ms${attempt > 1 ? ` · ${attempt} attempts (${why})` : ""}`;
        return r;
      }
      if (!RETRYABLE.has(r.error.code)) {
        li.dataset.state = "failed";
        li.dataset.code = r.error.code;
        res.textContent = `${r.error.code}: ${r.error.message}`;
        return r;
      }
      why = r.error.code;
    } catch (e) {
      why = e.message; // timeout, no responders, disconnected
    }
    if (performance.now() - started > 30000) {
      li.dataset.state = "failed";
      res.textContent = `gave up after ${attempt} attempts (${why}); the outcome is unknown`;
      return null;
    }
    res.textContent = `retrying with the same request ID (${why}) · attempt ${attempt + 1}`;
    await sleep(backoff / 2 + Math.random() * backoff);
    backoff = Math.min(backoff * 2, 1000);
  }
}

// ---- credentials, for a server with --auth ----

const CREDS_KEY = "tickfence-player-creds";

function showAuth(err) {
  $("auth").hidden = false;
  $("auth-error").textContent = err || "";
}

function setupAuthForm() {
  $("auth").onsubmit = (e) => {
    e.preventDefault();
    const text = $("creds").value;
    try {
      parseCreds(text);
    } catch (err) {
      $("auth-error").textContent = err.message;
      return;
    }
    sessionStorage.setItem(CREDS_KEY, text);
    location.reload();
  };
  $("creds-forget").onclick = () => {
    sessionStorage.removeItem(CREDS_KEY);
    $("creds").value = "";
    $("auth-error").textContent = "forgotten";
  };
}

// ---- start ----

async function main() {
  $("player").value = params.get("player") || `player-${session.slice(0, 4)}`;
  $("durable").checked = params.get("durable") === "1";
  try {
    const r = await fetch("config.json", { cache: "no-store" });
    cfg = await r.json();
  } catch (e) {
    setConn("refused", `could not load config.json: ${e.message}`);
    return;
  }
  const url = params.get("nats") || cfg.nats;
  if (!url) {
    setConn("refused", "no NATS WebSocket URL: start tickd with --nats-websocket (embedded server) or --demo-page-nats ws://HOST:PORT (tickd server --websocket), or add ?nats=ws://HOST:PORT");
    return;
  }
  for (let i = 0; i < (cfg.demo || 0); i++) addKnown(`demo-${i}`, "config");
  setupAuthForm();
  const creds = sessionStorage.getItem(CREDS_KEY) || "";
  try {
    // A player's own credential (not a trusted gateway's) is its player: the nodes refuse it
    // acting for anyone else, so the page does not offer to.
    const c = creds ? parseCreds(creds) : null;
    if (c && c.name && !c.tags.includes("trusted")) {
      $("player").value = c.name;
      $("player").readOnly = true;
      asPlayer = c.name;
    }
    nc = new Conn(url, { onStatus: setConn, creds });
  } catch (e) {
    showAuth(`the stored credentials: ${e.message}`);
    return;
  }
  window.tickfencePlayer = { conn: nc, command, select, shown }; // for the browser test and the console
  try {
    await nc.connect();
  } catch (e) {
    setConn("refused", e.message);
    if (/credentials|authoriz|authentic|secure context/i.test(e.message)) showAuth(creds ? e.message : "");
    return;
  }
  for (const b of ["join", "attack", "leave"]) $(b).onclick = () => command(b);
  $("durable").onchange = () => current && select(current.id);
  $("controls").onsubmit = (e) => (e.preventDefault(), command("attack"));
  $("rescan").onclick = rescan;
  rescan();
  const id = params.get("id") || (cfg.demo > 0 ? "demo-0" : "");
  renderList();
  if (id) {
    addKnown(id, "config");
    select(id);
  }
}

main();
