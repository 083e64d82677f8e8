// Package bench holds Go benchmarks of tickfence's hot paths. Run them with
//
//	go test -run '^$' -bench . ./bench/
package bench

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/actor/dungeon"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
)

// record is a dungeon of 8 players whose opaque request window is full (128 requests): what
// every record of the demo looked like before client sessions.
func record(b *testing.B) store.Record {
	l, err := dungeon.Kind{}.New("bench", actor.Command{})
	if err != nil {
		b.Fatal(err)
	}
	s := l.(*dungeon.State)
	for i := 0; i < 8; i++ {
		body, _ := wire.Canonical(map[string]any{"type": "join", "player": string(rune('a' + i))})
		_, _ = s.Handle(1, actor.Command{Type: "join", Body: body})
	}
	state, _ := s.MarshalState()
	r := store.Record{Token: 123, Tick: 4567, Kind: "dungeon", State: state}
	for i := 0; i < store.RequestWindow; i++ {
		r.RememberRequest(store.Request{ID: "req-0123456789", Fingerprint: uint64(i), Result: []byte{0x81, 0xa2, 'o', 'k', 0xc3}, At: 4567}, 1<<20)
	}
	return r
}

// sessionRecord is the same dungeon with one client session holding 4 unacknowledged answers
// (a gateway with 4 players' commands in flight): what the demo writes with client sessions.
func sessionRecord(b *testing.B) store.Record {
	r := record(b)
	r.Reqs = nil
	for i := uint64(1); i <= 4; i++ {
		r.RememberSession("go-0123456789abcdef", 100, store.SeqResult{Seq: 100 + i, Fingerprint: i, Result: []byte{0x81, 0xa2, 'o', 'k', 0xc3}}, 4567, 6000)
	}
	return r
}

func BenchmarkEncodeRecordSession(b *testing.B) {
	r := sessionRecord(b)
	for b.Loop() {
		if _, err := store.EncodeRecord(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRecordSession(b *testing.B) {
	enc, _ := store.EncodeRecord(sessionRecord(b))
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := store.DecodeRecord(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeRecord(b *testing.B) {
	r := record(b)
	for b.Loop() {
		if _, err := store.EncodeRecord(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeRecord(b *testing.B) {
	enc, _ := store.EncodeRecord(record(b))
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := store.DecodeRecord(enc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFencedWriteMemory(b *testing.B) {
	ctx := context.Background()
	st := memstore.New()
	if _, err := st.Bootstrap(ctx, store.Cluster{Shards: 1, Partitions: 1, Epoch: 1}); err != nil {
		b.Fatal(err)
	}
	a := store.Assignment{Owner: "n", Session: "s"}
	tok, _ := st.Assign(ctx, 1, 0, a, 0)
	g := store.Grant{Epoch: 1, Shard: 0, Token: tok, Assignment: a}
	if _, err := st.Create(ctx, g, "i", store.Record{Kind: "dungeon"}); err != nil {
		b.Fatal(err)
	}
	r := record(b)
	for b.Loop() {
		if _, err := st.Write(ctx, g, "i", r); err != nil {
			b.Fatal(err)
		}
	}
}

type nopTicker struct{ n uint64 }

func (t *nopTicker) Tick(time.Time) { t.n++ }

// BenchmarkEngineTick is the engine's own cost of one tick (scheduling, chunking, lateness
// observation), driven by a manual clock: 1000 instances over 50 buckets, one bucket per
// iteration, reported per tick.
func BenchmarkEngineTick(b *testing.B) {
	start := time.Unix(1000, 0)
	var late time.Duration
	e, err := actor.NewEngine(actor.EngineConfig{Rate: 20, Workers: 1, Start: start, Manual: true,
		ObserveWorker: func(int) func(l, d time.Duration) { return func(l, d time.Duration) { late += l } }})
	if err != nil {
		b.Fatal(err)
	}
	const n = 1000
	for range n {
		e.Add(&nopTicker{})
	}
	k := 0
	ticks := 0
	for b.Loop() {
		k++
		ticks += e.Advance(start.Add(time.Duration(k) * time.Millisecond))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(ticks), "ns/tick")
	b.ReportMetric(float64(ticks)/float64(b.N), "ticks/op")
}
