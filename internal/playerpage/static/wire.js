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
// soon as the new owner's first frame has arrived.
export class FrameFilter {
  constructor() {
    this.seen = false;
    this.epoch = 0n;
    this.token = 0n;
    this.last = new Map();
  }
  pass(topic, st) {
    if (!this.seen || st.epoch > this.epoch || (st.epoch === this.epoch && st.token > this.token)) {
      this.seen = true;
      this.epoch = st.epoch;
      this.token = st.token;
      this.last = new Map();
    } else if (st.epoch < this.epoch || st.token < this.token) {
      return false;
    } else {
      const l = this.last.get(topic);
      if (l && (st.tick < l[0] || (st.tick === l[0] && st.index <= l[1]))) return false;
    }
    this.last.set(topic, [st.tick, st.index]);
    return true;
  }
}
