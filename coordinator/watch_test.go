package coordinator

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// endingWatch ends the first control watch one second after it starts, as an ordered consumer
// that gives up does.
type endingWatch struct {
	store.Store
	once sync.Once
}

func (e *endingWatch) ControlWatch(ctx context.Context, filter string) (<-chan store.Entry, error) {
	first := false
	e.once.Do(func() { first = true })
	if first && filter == ">" {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		context.AfterFunc(ctx, cancel)
		return e.Store.ControlWatch(wctx, filter)
	}
	return e.Store.ControlWatch(ctx, filter)
}

// A leader whose watch of the control bucket ended must not go on planning on a frozen view: a
// node that dies afterwards would keep its shards forever.
func TestLeaderRebuildsItsViewWhenAWatchEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		mem := memstore.New()
		const shards = 4
		if _, err := mem.Bootstrap(ctx, store.Cluster{Shards: shards, Partitions: 1, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"n1", "n2"} {
			v, _ := json.Marshal(store.NodeRecord{Session: n + "-s"})
			if _, err := mem.ControlCreate(ctx, store.NodeKey(n), v, 0); err != nil {
				t.Fatal(err)
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(rctx, Config{Store: &endingWatch{Store: mem}, Node: "c", Session: "cs", NoRebalance: true,
				Registerer: prometheus.NewRegistry()})
		}()
		time.Sleep(3 * time.Second) // the first control watch has ended by now
		if err := mem.ControlDelete(ctx, store.NodeKey("n1"), 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
		for s := uint32(0); s < shards; s++ {
			if a, _, err := mem.Assignment(ctx, 1, s); err != nil || a.Owner != "n2" {
				t.Errorf("shard %d after n1 died: owner %q (err %v), want n2", s, a.Owner, err)
			}
		}
		cancel()
		<-done
	})
}
