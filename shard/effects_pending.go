package shard

// pendingEffects counts the effects held in the stored records of this host's instances that the
// effects stream has not acknowledged (tickfence_effects_pending, the backlog). It runs when the
// metrics are scraped and takes the host's, a shard's and an instance's lock one at a time, never
// two at once.
func (h *Host) pendingEffects() uint64 {
	h.mu.Lock()
	shards := make([]*shardRun, 0, len(h.shards))
	for _, sh := range h.shards {
		shards = append(shards, sh)
	}
	h.mu.Unlock()
	var n uint64
	for _, sh := range shards {
		sh.mu.Lock()
		insts := make([]*instance, 0, len(sh.insts))
		for _, in := range sh.insts {
			insts = append(insts, in)
		}
		sh.mu.Unlock()
		for _, in := range insts {
			in.mu.Lock()
			for _, e := range in.acked.Fx {
				if in.fx[e.Key] != fxDelivered {
					n++
				}
			}
			in.mu.Unlock()
		}
	}
	return n
}
