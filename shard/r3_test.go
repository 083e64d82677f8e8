package shard_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestR3StreamLeaderKilled: three JetStream servers, R3 buckets, an owner writing under load (its
// pipelined fenced writes meet 10164 on the busy fence subject and are retried). The data stream's
// leader is shut down; after re-election writes continue and every acknowledged command is in the
// stored state exactly once.
func TestR3StreamLeaderKilled(t *testing.T) {
	for _, ws := range []shard.WriteStrategy{shard.WriteSingle, shard.WriteBatches} {
		t.Run(string(ws), func(t *testing.T) { testR3StreamLeaderKilled(t, ws) })
	}
}

func testR3StreamLeaderKilled(t *testing.T, ws shard.WriteStrategy) {
	srvs, err := natsserver.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range srvs {
			s.Stop()
		}
	}()
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.ClientURL())
	}
	nc, err := natskv.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := natskv.Open(nc, natskv.Options{Replicas: 3, AckTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A cluster that just formed may not place R3 streams yet: retry the first bootstrap briefly.
	for start := time.Now(); ; {
		_, err := st.Bootstrap(context.Background(), store.Cluster{Shards: testShards, Partitions: 1, Epoch: 1})
		if err == nil {
			break
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("bootstrap on the R3 cluster: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	n := newNode(t, st, "A", nodeOpt{checkpointEvery: 1 << 30, writeStrategy: ws})
	for s := uint32(0); s < testShards; s++ {
		n.grant(s)
	}
	ids := make([]string, 16)
	for i := range ids {
		ids[i] = idIn(uint32(i%testShards), i)
		// Like a client: the same request ID again while the answer is "retry" (a new R3 stream
		// may still be electing its leader).
		for attempt := 0; ; attempt++ {
			r := n.send(ids[i], "c", map[string]any{"type": "create", "kind": "counter"})
			if r.OK || attempt == 50 || r.Error.Code != wire.CodeRetry && r.Error.Code != wire.CodeBusy && r.Error.Code != wire.CodeUnknownOutcome {
				mustOK(t, r, "create")
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	acked := make([]int64, len(ids))
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sent, retried int
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				i := (w + k) % len(ids)
				reqID := fmt.Sprintf("w%d-%d", w, k)
				for attempt := 0; ; attempt++ { // a client: same request ID until answered
					ch := n.submit(ids[i], reqID, mustBody(t, map[string]any{"type": "add", "by": 1}))
					var r wire.Reply
					select {
					case b := <-ch:
						r, _ = wire.DecodeReply(b, false)
					case <-time.After(30 * time.Second):
						t.Errorf("%s: no answer", reqID)
						return
					}
					if r.OK {
						mu.Lock()
						acked[i]++
						sent++
						retried += attempt
						mu.Unlock()
						break
					}
					if r.Error.Code != wire.CodeRetry && r.Error.Code != wire.CodeNotOwner && r.Error.Code != wire.CodeBusy && r.Error.Code != wire.CodeUnknownOutcome {
						t.Errorf("%s: %v", reqID, r.Error)
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(time.Second)
	stream := "KV_" + store.DataBucket(1, 0)
	killed := false
	for _, s := range srvs {
		if s.JetStreamIsStreamLeader("$G", stream) {
			t.Logf("shutting down %s, leader of %s", s.Name(), stream)
			s.Stop()
			killed = true
			break
		}
	}
	if !killed {
		t.Fatal("no leader found for the data stream")
	}
	mu.Lock()
	before := sent
	mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		after := sent
		mu.Unlock()
		if after > before+300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes did not continue after the leader was killed (%d acknowledged before, %d after)", before, after)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	for i, id := range ids {
		_, cs := load(t, st, id)
		if cs.N != acked[i] {
			t.Fatalf("%s: stored n = %d, acknowledged %d adds", id, cs.N, acked[i])
		}
	}
	if ws == shard.WriteBatches {
		if m := batchHistogram(t, n); m.count == 0 {
			t.Error("no batch was sent")
		} else {
			t.Logf("%d batches of %.1f records on average", m.count, m.sum/float64(m.count))
		}
	}
	t.Logf("%d commands acknowledged (%d retries), every effect stored exactly once after the stream leader was killed", sent, retried)
}
