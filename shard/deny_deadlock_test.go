package shard_test

import (
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickfence/tickfence/store/memstore"
)

// Lock order: a tombstone's tick holds in.mu and calls sh.deny; had deny taken sh.mu (it once did),
// handedOffLate (ExpectHandOff on a running shard: the move record arriving after the grant)
// holding sh.mu and taking each in.mu (notePause) would deadlock with it: found by review.
func TestTombstoneAnswerDoesNotDeadlockWithALateMoveRecord(t *testing.T) {
	mem := memstore.New()
	n := newNode(t, mem, "n1", nodeOpt{})
	const s = 2
	n.grant(s)
	var ids []string
	for i := 0; i < 64; i++ {
		id := idIn(s, 100+i)
		ids = append(ids, id)
		mustOK(t, n.send(id, "c-"+id, map[string]any{"type": "create", "kind": "counter"}), "create")
		mustOK(t, n.send(id, "e-"+id, map[string]any{"type": "end"}), "end")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var answered atomic.Int64
	wg.Add(2)
	go func() { // the move record, seen again and again (watch replays), on a running shard
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n.host.ExpectHandOff(s, time.Time{})
		}
	}()
	go func() { // clients asking ended instances
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			for _, id := range ids {
				ch := n.submit(id, fmt.Sprintf("g%d-%s", k, id), mustBody(t, map[string]any{"type": "get"}))
				go func() {
					select {
					case <-ch:
						answered.Add(1)
					case <-time.After(30 * time.Second):
					}
				}()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		done := make(chan bool, 1)
		go func() { done <- n.host.Running(s) }() // takes sh.mu
		select {
		case <-done:
			time.Sleep(20 * time.Millisecond)
			continue
		case <-time.After(3 * time.Second):
		}
		var b []byte
		w := &sliceWriter{&b}
		_ = pprof.Lookup("goroutine").WriteTo(w, 1)
		fmt.Fprintf(os.Stderr, "%s\n", b)
		fmt.Fprintf(os.Stderr, "DEADLOCK: sh.mu not available for 3s; %d gets answered before\n", answered.Load())
		os.Exit(1) // the host cannot be closed any more (flushThen needs sh.mu)
	}
	close(stop)
	wg.Wait()
	if answered.Load() == 0 {
		t.Fatal("no get of an ended instance was answered")
	}
	t.Logf("no deadlock in 2s; %d gets answered", answered.Load())
}

type sliceWriter struct{ b *[]byte }

func (w *sliceWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }
