// What every gateway computes (DESIGN 1 and 8), as the Go code does: the shard of an instance ID
// (store.ShardOf), the watcher's rule for frames (shard/wire.FrameFilter), and what a watcher does
// with a frame's stored tick (shard/wire.Rewinds, shard/wire.Holdback). TestWireJS runs them
// against the Go ones.

// fnv1a32 is the shard function of DESIGN 1: FNV-1a-32 of the instance ID's bytes, mod shards.
export function fnv1a32(s) {
  let h = 0x811c9dc5;
  for (const b of new TextEncoder().encode(s)) {
    h ^= b;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h >>> 0;
}

// A frame's line (shard/wire.Line): its grant and how often its owner went back to its stored
// state under it (Tickfence-Reverts). lineAfter: a is newer than b.
const lineOf = (st) => ({ epoch: st.epoch, token: st.token, reverts: st.reverts ?? 0n });
const sameLine = (a, b) => a.epoch === b.epoch && a.token === b.token && a.reverts === b.reverts;
function lineAfter(a, b) {
  if (a.epoch !== b.epoch) return a.epoch > b.epoch;
  if (a.token !== b.token) return a.token > b.token;
  return a.reverts > b.reverts;
}

// FrameFilter is the watcher's rule (shard/wire.FrameFilter): keep the highest line (epoch,
// token, reverts) seen on any of the instance's subjects and drop frames below it; under that line
// keep per topic the last (tick, frame) shown and drop one not after it. A zombie's frames die here
// as soon as the new owner's first frame has arrived. What is followed holds only while it is fed:
// once the followed grant has passed nothing for stale ms another grant's frame is shown and
// followed, and once a topic has passed nothing for stale ms the next frame of it is shown, so one
// forged frame (a huge token, or the owner's own grant with a huge tick) hides the owner's for
// that long at most.
export const DEFAULT_FRAME_STALE_MS = 2000;

export class FrameFilter {
  constructor(staleMs = DEFAULT_FRAME_STALE_MS) {
    this.stale = staleMs;
    this.seen = false;
    this.line = { epoch: 0n, token: 0n, reverts: 0n };
    this.at = 0;
    this.last = new Map(); // topic → [tick, frame, at]
  }
  pass(topic, st, now = performance.now()) {
    const silent = (since) => this.stale > 0 && now - since > this.stale;
    const newer = lineAfter(lineOf(st), this.line);
    const older = lineAfter(this.line, lineOf(st));
    if (!this.seen || newer || (older && silent(this.at))) {
      this.seen = true;
      this.line = lineOf(st);
      this.last = new Map();
    } else if (older) {
      return false;
    } else {
      const l = this.last.get(topic);
      if (l && (st.tick < l[0] || (st.tick === l[0] && st.index <= l[1])) && !silent(l[2])) return false;
    }
    this.at = now;
    this.last.set(topic, [st.tick, st.index, now]);
    return true;
  }
}

// Rewinds (shard/wire.Rewinds) tells a watcher that shows every frame when what it showed was
// undone: a frame of a new line whose stored tick is below the highest tick shown under the line
// before — a new owner went on from its stored tick, or the owner went back to it — says so.
export class Rewinds {
  constructor() {
    this.line = null;
    this.high = 0n; // the highest tick shown under line
  }
  shown(st) {
    let rewound = false;
    if (this.line && !sameLine(lineOf(st), this.line)) {
      rewound = this.high > st.stored;
      this.high = 0n;
    }
    this.line = lineOf(st);
    if (st.tick > this.high) this.high = st.tick;
    return rewound;
  }
}

// Holdback (shard/wire.Holdback) holds the frames a watcher would show until a later message of
// their line — a frame or a stored notice — says their tick is stored, then releases them in the
// order they came; when the line changes, what it holds is dropped, never shown, and if the old
// line had gone past the new line's stored tick the next frame released says rewound.
export const DEFAULT_HOLDBACK = 1024;

export class Holdback {
  constructor(max = DEFAULT_HOLDBACK) {
    this.max = max;
    this.line = null;
    this.stored = 0n;
    this.high = 0n;
    this.held = []; // [tick, value]
    this.rewound = false;
    this.unconfirmed = 0;
    this.overflowed = 0;
  }
  // frame takes a frame that passed the rule: {released: [values, oldest first], rewound}.
  frame(st, v) {
    this.follow(lineOf(st), st.stored);
    if (st.tick > this.high) this.high = st.tick;
    if (this.held.length >= this.max && st.tick > this.stored) {
      this.held.shift();
      this.overflowed++;
    }
    this.held.push([st.tick, v]);
    return this.release();
  }
  // notice takes a stored notice ({epoch, token, reverts, stored}); one of another line is ignored.
  notice(n) {
    if (!this.line || !sameLine(lineOf(n), this.line)) return { released: [], rewound: false };
    if (n.stored > this.stored) this.stored = n.stored;
    return this.release();
  }
  follow(line, stored) {
    if (this.line && !sameLine(line, this.line)) {
      if (this.high > stored) this.rewound = true;
      this.unconfirmed += this.held.length;
      this.held = [];
      this.stored = 0n;
      this.high = 0n;
    }
    this.line = line;
    if (stored > this.stored) this.stored = stored;
  }
  release() {
    const released = [];
    this.held = this.held.filter(([tick, v]) => (tick <= this.stored ? (released.push(v), false) : true));
    let rewound = false;
    if (released.length > 0) {
      rewound = this.rewound;
      this.rewound = false;
    }
    return { released, rewound };
  }
}
