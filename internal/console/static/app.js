// tickfence console: one EventSource ("state" events carry the whole compact view), one canvas
// for the shard grid. No framework, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
const PALETTE = [
  [31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40], [148, 103, 189], [140, 86, 75],
  [227, 119, 194], [188, 189, 34], [23, 190, 207], [127, 127, 127], [174, 199, 232], [255, 187, 120],
];
const UNASSIGNED = [225, 228, 232];

// colourOf returns the RGB of an owner's index in view.owners (-1: unassigned).
function colourOf(i) {
  if (i < 0) return UNASSIGNED;
  if (i < PALETTE.length) return PALETTE[i];
  const h = (i * 137.508) % 360, s = 0.55, l = 0.5; // HSL → RGB past the palette
  const k = (n) => (n + h / 30) % 12, a = s * Math.min(l, 1 - l);
  const f = (n) => l - a * Math.max(-1, Math.min(k(n) - 3, Math.min(9 - k(n), 1)));
  return [Math.round(255 * f(0)), Math.round(255 * f(8)), Math.round(255 * f(4))];
}
const css = (rgb) => `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;

let view = null;
let receivedAt = performance.now(); // when view came
let selected = -1;
let layout = { cols: 1, cell: 10, rows: 1 };
let lastTimeline = "";
let gridImage = null, gridSmall = null;
const littleEndian = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
const stats = { updates: 0, bytes: 0, parseMs: 0, renderMs: 0, maxMs: 0, lastMs: 0, drawn: 0, parts: {} };
window.consoleStats = stats;
window.consoleColour = colourOf;
window.consoleLayout = () => layout;

function fmtMs(ms) {
  if (ms >= 10000) return (ms / 1000).toFixed(0) + " s";
  if (ms >= 1000) return (ms / 1000).toFixed(1) + " s";
  return Math.round(ms) + " ms";
}

function render(v) {
  view = v;
  window.consoleState = v;
  const nodes = new Map(v.nodes.map((n) => [n.id, n]));
  $("summary").textContent = `${v.shards} shards, epoch ${v.epoch}, ${v.replicas} replica${v.replicas === 1 ? "" : "s"} · ` +
    `coordinator leader: ${v.leader || "(none)"} · ${v.nodes.length} live node${v.nodes.length === 1 ? "" : "s"} · ` +
    `imbalance ${v.imbalance.toFixed(2)} · ${v.moves.length} move${v.moves.length === 1 ? "" : "s"} in flight` +
    (v.applying ? " · rebalancing…" : "");
  timed("nodes", () => renderNodes(v));
  timed("instances", () => renderInstances(v));
  timed("lateness", () => renderLateness(v));
  timed("grid", () => renderGrid(v, nodes));
  timed("moves", () => renderMoves(v));
  timed("timeline", () => renderTimeline(v));
  timed("layout", () => void document.body.offsetHeight); // style and layout too, not only the script
}

// timed adds the milliseconds f takes to stats.parts[name].
function timed(name, f) {
  const t0 = performance.now();
  f();
  stats.parts[name] = (stats.parts[name] || 0) + performance.now() - t0;
}

function renderNodes(v) {
  const tbody = $("nodes").tBodies[0];
  const seen = new Set();
  v.nodes.forEach((n, i) => {
    seen.add(n.id);
    let tr = tbody.querySelector(`tr[data-node="${CSS.escape(n.id)}"]`);
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.node = n.id;
      tr.innerHTML = `<td><span class="swatch"></span></td><td class="id"></td><td><span class="state"></span></td>` +
        `<td class="num shards"></td><td class="num instances"></td><td class="num load"></td><td class="num age"></td>` +
        `<td class="num p99"></td><td class="num weight"></td>` +
        `<td><button class="drain">drain</button> <button class="undrain">undrain</button></td>`;
      tr.querySelector(".drain").onclick = () => act("drain", { node: n.id });
      tr.querySelector(".undrain").onclick = () => act("undrain", { node: n.id });
      tbody.appendChild(tr);
    }
    tr.querySelector(".swatch").style.background = css(colourOf(i));
    tr.querySelector(".id").textContent = n.id + (n.id === v.leader ? " ★" : "");
    tr.querySelector(".id").title = "session " + n.session + (n.id === v.leader ? " (coordinator leader)" : "");
    // Lease ages go on between pushes: a node not renewed in time is unrenewed by now (it ticks on
    // the fence for its ride-through, then pauses), whatever the last push said.
    const age = n.lease_age_ms + (performance.now() - receivedAt);
    const state = age > v.lease_ttl_ms - v.lease_margin_ms ? "unrenewed" : n.state;
    const st = tr.querySelector(".state");
    st.textContent = state + (n.stuck ? " (stuck: peers drained)" : "");
    st.className = "state " + state;
    tr.querySelector(".shards").textContent = n.shards;
    tr.querySelector(".instances").textContent = n.instances;
    tr.querySelector(".load").textContent = (100 * n.load).toFixed(1) + "%";
    tr.querySelector(".age").textContent = fmtMs(age);
    tr.querySelector(".p99").textContent = n.p99_lateness_ms.toFixed(2) + " ms";
    tr.querySelector(".weight").textContent = n.weight;
    tr.querySelector(".drain").disabled = n.drained;
    tr.querySelector(".undrain").disabled = !n.drained;
  });
  for (const tr of [...tbody.rows]) if (!seen.has(tr.dataset.node)) tr.remove();
}

function renderInstances(v) {
  const max = Math.max(1, ...v.nodes.map((n) => n.instances));
  $("instances").innerHTML = "";
  v.nodes.forEach((n, i) => {
    const d = document.createElement("div");
    d.className = "bar";
    d.innerHTML = `<span style="width:4em"></span><span class="fill"></span><span class="num"></span>`;
    d.children[0].textContent = n.id;
    d.children[1].style.width = Math.max(2, (240 * n.instances) / max) + "px";
    d.children[1].style.background = css(colourOf(i));
    d.children[2].textContent = n.instances;
    $("instances").appendChild(d);
  });
}

function renderLateness(v) {
  const c = $("lateness"), g = c.getContext("2d");
  const W = c.width, H = c.height, L = 44, B = 16;
  g.clearRect(0, 0, W, H);
  let maxMs = 1, t0 = Infinity;
  for (const pts of Object.values(v.lateness)) for (const p of pts) { maxMs = Math.max(maxMs, p.ms); t0 = Math.min(t0, p.t); }
  maxMs = Math.ceil(maxMs * 1.1);
  const span = Math.max(60000, v.at - (isFinite(t0) ? t0 : v.at));
  $("history").textContent = Math.round(span / 60000) + " min";
  g.strokeStyle = "#ddd"; g.fillStyle = "#777"; g.font = "10px system-ui"; g.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    const y = H - B - f * (H - B - 6);
    g.beginPath(); g.moveTo(L, y); g.lineTo(W, y); g.stroke();
    g.fillText((f * maxMs).toFixed(maxMs < 10 ? 1 : 0) + " ms", 2, y + 3);
  }
  g.fillText("-" + Math.round(span / 1000) + " s", L, H - 3);
  g.fillText("now", W - 22, H - 3);
  v.nodes.forEach((n, i) => {
    const pts = v.lateness[n.id] || [];
    g.strokeStyle = css(colourOf(i)); g.lineWidth = 1.5; g.beginPath();
    pts.forEach((p, k) => {
      const x = L + ((p.t - (v.at - span)) / span) * (W - L), y = H - B - (p.ms / maxMs) * (H - B - 6);
      k ? g.lineTo(x, y) : g.moveTo(x, y);
    });
    g.stroke();
  });
}

function renderGrid(v, nodes) {
  const n = v.grid.length, c = $("grid");
  const cols = Math.max(1, Math.ceil(Math.sqrt(n)));
  const room = Math.max(200, Math.min(720, c.parentElement.clientWidth - 24));
  const cell = Math.max(3, Math.min(32, Math.floor(room / cols)));
  const rows = Math.ceil(n / cols);
  if (c.width !== cols * cell || c.height !== rows * cell) { c.width = cols * cell; c.height = rows * cell; }
  layout = { cols, cell, rows };
  const g = c.getContext("2d");
  const gap = cell >= 6 ? 1 : 0;
  const counts = new Array(v.owners.length).fill(0);
  let unassigned = 0;
  // One pixel per shard in a small image, drawn scaled up without smoothing, then the gaps as
  // lines: a few thousand array writes and one drawImage, where 4096 fillRect calls cost more.
  if (!gridImage || gridImage.width !== cols || gridImage.height !== rows) {
    gridImage = new ImageData(cols, rows);
    gridSmall = document.createElement("canvas");
    gridSmall.width = cols;
    gridSmall.height = rows;
  }
  const px = new Uint32Array(gridImage.data.buffer);
  px.fill(0);
  const packed = new Map();
  for (let s = 0; s < n; s++) {
    const o = v.grid[s];
    if (o < 0) unassigned++; else counts[o]++;
    let p = packed.get(o);
    if (p === undefined) {
      const [r, gg, b] = colourOf(o); // RGBA in memory order
      p = littleEndian ? ((255 << 24) | (b << 16) | (gg << 8) | r) >>> 0 : ((r << 24) | (gg << 16) | (b << 8) | 255) >>> 0;
      packed.set(o, p);
    }
    px[s] = p;
  }
  gridSmall.getContext("2d").putImageData(gridImage, 0, 0);
  g.clearRect(0, 0, c.width, c.height);
  g.imageSmoothingEnabled = false;
  g.drawImage(gridSmall, 0, 0, cols * cell, rows * cell);
  if (gap) {
    g.fillStyle = "#fff";
    for (let i = 1; i <= cols; i++) g.fillRect(i * cell - 1, 0, 1, c.height);
    for (let j = 1; j <= rows; j++) g.fillRect(0, j * cell - 1, c.width, 1);
  }
  const lastRow = n % cols;
  if (lastRow) g.clearRect(lastRow * cell, (rows - 1) * cell, c.width, cell); // past the last shard
  const index = new Map(v.owners.map((o, i) => [o, i]));
  for (const m of v.moves) { // the target's colour in the lower right half, outlined
    const x = (m.shard % cols) * cell, y = Math.floor(m.shard / cols) * cell, w = cell - gap;
    g.fillStyle = css(colourOf(index.has(m.to) ? index.get(m.to) : -1));
    g.beginPath(); g.moveTo(x + w, y); g.lineTo(x + w, y + w); g.lineTo(x, y + w); g.closePath(); g.fill();
    g.strokeStyle = "#000"; g.lineWidth = 1; g.strokeRect(x + 0.5, y + 0.5, w - 1, w - 1);
  }
  g.fillStyle = "#fff";
  for (const s of v.pinned) {
    const r = Math.max(1, cell / 6);
    g.beginPath(); g.arc((s % cols) * cell + (cell - gap) / 2, Math.floor(s / cols) * cell + (cell - gap) / 2, r, 0, 7); g.fill();
  }
  if (selected >= 0 && selected < n) {
    g.strokeStyle = "#000"; g.lineWidth = 2;
    g.strokeRect((selected % cols) * cell + 1, Math.floor(selected / cols) * cell + 1, cell - gap - 2, cell - gap - 2);
  }
  stats.drawn = n;
  const leg = $("legend");
  leg.innerHTML = "";
  v.owners.forEach((o, i) => {
    const s = document.createElement("span");
    s.dataset.owner = o;
    s.dataset.count = counts[i];
    s.innerHTML = `<span class="swatch"></span> `;
    s.firstChild.style.background = css(colourOf(i));
    s.append(`${o}${nodes.has(o) ? "" : " (no lease)"}: ${counts[i]}`);
    leg.appendChild(s);
  });
  if (unassigned) {
    const s = document.createElement("span");
    s.dataset.owner = "";
    s.dataset.count = unassigned;
    s.innerHTML = `<span class="swatch" style="background:${css(UNASSIGNED)}"></span> unassigned: ${unassigned}`;
    leg.appendChild(s);
  }
  $("grid-caption").textContent = `(${n}; ${cols} per row; ○ pinned, ◪ moving)`;
  if (selected >= 0) showShard(selected);
}

function renderMoves(v) {
  $("moves-count").textContent = `(${v.moves.length})`;
  const lines = v.moves.slice(0, 200).map((m) => `shard ${m.shard}: ${m.from} → ${m.to} (${m.state})`);
  if (v.moves.length > 200) lines.push(`… and ${v.moves.length - 200} more`);
  $("moves").textContent = lines.join("\n") || "none";
  $("moves").style.whiteSpace = "pre";
}

function renderTimeline(v) {
  const key = v.timeline.length + ":" + JSON.stringify(v.timeline[v.timeline.length - 1] || null);
  if (key === lastTimeline) return;
  lastTimeline = key;
  const ol = $("timeline");
  ol.innerHTML = "";
  for (const e of v.timeline.slice().reverse()) {
    const li = document.createElement("li");
    li.className = e.kind;
    const t = document.createElement("time");
    t.textContent = new Date(e.at).toLocaleTimeString();
    li.appendChild(t);
    li.append(describe(e));
    ol.appendChild(li);
  }
}

function describe(e) {
  const list = (e.shards || []).join(", ") + (e.count > (e.shards || []).length ? ", …" : "");
  const n = e.count === 1 ? "shard" : `${e.count} shards`;
  switch (e.kind) {
    case "failover": return `failover: ${n} ${e.from} → ${e.to} (${list})`;
    case "handoff": return `hand-off: ${n} ${e.from} → ${e.to} (${list})`;
    case "placed": return `placed: ${n} on ${e.to} (${list})`;
    default: return e.text;
  }
}

function shardAt(ev) {
  const r = $("grid").getBoundingClientRect();
  const x = Math.floor((ev.clientX - r.left) / layout.cell), y = Math.floor((ev.clientY - r.top) / layout.cell);
  const s = y * layout.cols + x;
  return view && x < layout.cols && s >= 0 && s < view.grid.length ? s : -1;
}

function ownerName(s) {
  const o = view.grid[s];
  return o < 0 ? "(unassigned)" : view.owners[o];
}

function showShard(s) {
  $("shard-panel").hidden = false;
  $("sel-shard").textContent = s;
  const moving = view.moves.find((m) => m.shard === s);
  $("sel-owner").textContent = ownerName(s) + (view.pinned.includes(s) ? " (pinned)" : "") +
    (moving ? ` (moving to ${moving.to}: ${moving.state})` : "");
  const sel = $("move-to"), cur = sel.value;
  const opts = view.nodes.filter((n) => !n.drained && !n.leaving).map((n) => n.id);
  if ([...sel.options].map((o) => o.value).join() !== opts.join()) {
    sel.innerHTML = "";
    for (const id of opts) sel.add(new Option(id, id));
    if (opts.includes(cur)) sel.value = cur;
  }
}

$("grid").addEventListener("mousemove", (ev) => {
  const s = shardAt(ev);
  $("hover").textContent = s < 0 ? "\u00a0" : `shard ${s}: ${ownerName(s)}`;
});
$("grid").addEventListener("click", (ev) => {
  const s = shardAt(ev);
  if (s < 0) return;
  selected = s;
  renderGrid(view, new Map(view.nodes.map((n) => [n.id, n])));
});
$("move").onclick = () => act("move", { shard: selected, node: $("move-to").value });
$("pin").onclick = () => act("pin", { shard: selected });
$("unpin").onclick = () => act("unpin", { shard: selected });

function message(text, error) {
  $("message").textContent = text;
  $("message").className = error ? "error" : "";
}

async function post(path, body) {
  const r = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Tickfence-Console": "1" },
    body: JSON.stringify(body),
  });
  const a = await r.json().catch(() => ({ ok: false, error: `HTTP ${r.status}` }));
  if (!a.ok) throw new Error(a.error || `HTTP ${r.status}`);
  return a;
}

async function act(verb, body) {
  try {
    const a = await post("api/" + verb, body);
    message(a.text);
  } catch (e) {
    message(`${verb}: ${e.message}`, true);
  }
}

let planID = "";
$("plan").onclick = async () => {
  try {
    const a = await post("api/rebalance/plan", {});
    planID = a.id;
    $("plan-text").textContent = a.text + (a.plan.moves.length ? ": confirm to carry them out" : ": nothing to do");
    const tb = $("plan-moves").tBodies[0];
    tb.innerHTML = "";
    for (const m of a.plan.moves) {
      const tr = tb.insertRow();
      for (const x of [m.shard, m.from, m.to]) tr.insertCell().textContent = x;
    }
    $("plan-moves").hidden = !a.plan.moves.length;
    $("apply").hidden = !a.plan.moves.length;
    $("plan-view").hidden = false;
  } catch (e) {
    message("plan: " + e.message, true);
  }
};
$("apply").onclick = async () => {
  $("plan-view").hidden = true;
  await act("rebalance/apply", { id: planID });
};
$("cancel-plan").onclick = () => { $("plan-view").hidden = true; planID = ""; };

function connect() {
  const es = new EventSource("api/events");
  es.addEventListener("open", () => $("conn").classList.add("live"));
  es.addEventListener("error", () => $("conn").classList.remove("live"));
  es.addEventListener("state", (ev) => {
    const t0 = performance.now();
    const v = JSON.parse(ev.data);
    receivedAt = performance.now();
    const t1 = performance.now();
    render(v);
    const t2 = performance.now();
    stats.updates++;
    stats.bytes += ev.data.length;
    stats.parseMs += t1 - t0;
    stats.renderMs += t2 - t1;
    stats.lastMs = t2 - t0;
    if (stats.updates === 1) stats.firstMs = t2 - t0; // the page's first layout: apart from the updates after it
    else stats.maxMs = Math.max(stats.maxMs, t2 - t0);
    stats.lastBytes = ev.data.length;
  });
  $("conn").title = "live updates (Server-Sent Events)";
}
connect();
setInterval(() => view && renderNodes(view), 250); // lease ages between pushes
