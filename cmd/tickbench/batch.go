package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
)

// The per-shard strategies of DESIGN 4 for replicated streams, where the leader admits one fenced
// write per shard at a time: one write in flight per shard, against one atomic batch per shard per
// tick (AllowAtomicPublish, the fence checked once for the batch). Both run with several instances
// per shard; writes/s counts records.

// allowAtomic turns on atomic batch publishing on the data bucket's stream.
func allowAtomic(ctx context.Context, b *benchStore) error {
	s, err := b.js.Stream(ctx, "KV_"+b.bucket)
	if err != nil {
		return err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	cfg := info.Config
	cfg.AllowAtomicPublish = true
	_, err = b.js.UpdateStream(ctx, cfg)
	return err
}

// byShard groups the instances by shard.
func byShard(b *benchStore, shards int) [][]int {
	per := map[uint32][]int{}
	for i, id := range b.ids {
		s := store.ShardOf(id, uint32(shards))
		per[s] = append(per[s], i)
	}
	var out [][]int
	for s := 0; s < shards; s++ {
		if is := per[uint32(s)]; len(is) > 0 {
			out = append(out, is)
		}
	}
	return out
}

// atomicBatch writes every instance of one shard as one atomic batch: all but the last message
// are plain publishes, the last carries Nats-Batch-Commit and gets the one acknowledgement.
func atomicBatch(b *benchStore, shards int, groups [][]int, data []byte) func(o int) error {
	return func(o int) error {
		is := groups[o]
		id := nuid.Next()
		var reply *nats.Msg
		for k, i := range is {
			inst := b.ids[i]
			g := b.grants[store.ShardOf(inst, uint32(shards))]
			m := nats.NewMsg("$KV." + b.bucket + "." + store.InstanceKey(g.Shard, inst))
			m.Data = data
			m.Header.Set("Nats-Batch-Id", id)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(k+1))
			if k == 0 { // the fence, checked once for the whole batch
				tok := strconv.FormatUint(g.Token, 10)
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, tok)
				m.Header.Set(jetstream.ExpectedLastSubjSeqSubjHeader, "$KV."+b.bucket+"."+store.ShardKey(g.Shard))
			}
			if k < len(is)-1 {
				if err := b.nc.PublishMsg(m); err != nil {
					return err
				}
				continue
			}
			m.Header.Set("Nats-Batch-Commit", "1")
			var err error
			if reply, err = b.nc.RequestMsg(m, 10*time.Second); err != nil {
				return err
			}
		}
		var ack struct {
			Seq   uint64 `json:"seq"`
			Count int    `json:"count"`
			Error *struct {
				Code    int    `json:"err_code"`
				Message string `json:"description"`
			} `json:"error"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return err
		}
		if ack.Error != nil {
			return fmt.Errorf("batch: %d %s", ack.Error.Code, ack.Error.Message)
		}
		return nil
	}
}

// perShardRows measures one fenced write in flight per shard against one atomic batch per shard.
func perShardRows(ctx context.Context, b *benchStore, label string, shards int, rec store.Record, enc []byte, d time.Duration, p *progress) ([]writeResult, error) {
	if err := allowAtomic(ctx, b); err != nil {
		return nil, fmt.Errorf("allow atomic publish: %w", err)
	}
	groups := byShard(b, shards)
	perBatch := float64(len(b.ids)) / float64(len(groups))
	w := fenced(b, shards, rec)
	turn := make([]int, len(groups))
	single := loop(label+" fenced/shard", len(groups), d, p, func(o int) error {
		is := groups[o]
		turn[o]++
		return w(is[turn[o]%len(is)])
	})
	single.Method = fmt.Sprintf("fenced, one in flight per shard (%d shards)", len(groups))
	batch := loop(label+" batch/shard", len(groups), d, p, atomicBatch(b, shards, groups, enc))
	batch.Method = fmt.Sprintf("atomic batch per shard (%d shards × %.0f)", len(groups), perBatch)
	// loop counts batches: report records, and latency per batch.
	batch.WritesPerS *= perBatch
	return []writeResult{single, batch}, nil
}

// writesPerShard runs the per-shard strategies on fresh servers (one, or three for R3) whose
// cluster has few shards, so each shard holds several instances.
func writesPerShard(profile string, replicas, inflight, shards, payload int, d time.Duration, p *progress) ([]writeResult, error) {
	ctx := context.Background()
	var opt nats.Option
	if replicas == 3 {
		p.line("%s: starting three servers", profile)
		srvs, stop, err := startCluster(3)
		if err != nil {
			return nil, err
		}
		defer stop()
		opt = srvs[0].ConnectOption()
	} else {
		dir, err := os.MkdirTemp("", "tickbench-js-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		srv, err := natsserver.Start(natsserver.Config{DataDir: dir})
		if err != nil {
			return nil, err
		}
		defer srv.Stop()
		opt = srv.ConnectOption()
	}
	b, err := openBench(ctx, opt, jetstream.FileStorage, replicas, inflight, shards)
	if err != nil {
		return nil, err
	}
	defer b.close()
	rec, enc := benchRecord(payload)
	rows, err := perShardRows(ctx, b, profile, shards, rec, enc, d, p)
	for i := range rows {
		rows[i].Profile, rows[i].Shards, rows[i].PayloadSize = profile, shards, len(enc)
	}
	return rows, err
}
