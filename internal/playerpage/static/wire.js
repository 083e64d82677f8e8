// What every gateway computes (DESIGN 1 and 8), as the Go code does: the shard of an instance ID
// (store.ShardOf) and the watcher's rule for frames (shard/wire.FrameFilter). TestWireJS runs both
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

// FrameFilter is the watcher's rule (shard/wire.FrameFilter): keep the highest (epoch, token)
// seen on any of the instance's subjects and drop frames below it; under that grant keep per
// topic the last (tick, frame) shown and drop one not after it. A zombie's frames die here as
// soon as the new owner's first frame has arrived. What is followed holds only while it is fed:
// once the followed grant has passed nothing for stale ms another grant's frame is shown and
// followed, and once a topic has passed nothing for stale ms the next frame of it is shown, so one
// forged frame (a huge token, or the owner's own grant with a huge tick) hides the owner's for
// that long at most.
export const DEFAULT_FRAME_STALE_MS = 2000;

export class FrameFilter {
  constructor(staleMs = DEFAULT_FRAME_STALE_MS) {
    this.stale = staleMs;
    this.seen = false;
    this.epoch = 0n;
    this.token = 0n;
    this.at = 0;
    this.last = new Map(); // topic → [tick, frame, at]
  }
  pass(topic, st, now = performance.now()) {
    const silent = (since) => this.stale > 0 && now - since > this.stale;
    const newer = st.epoch > this.epoch || (st.epoch === this.epoch && st.token > this.token);
    const older = st.epoch < this.epoch || (st.epoch === this.epoch && st.token < this.token);
    if (!this.seen || newer || (older && silent(this.at))) {
      this.seen = true;
      this.epoch = st.epoch;
      this.token = st.token;
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
