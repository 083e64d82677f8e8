// Package linear checks that the commands clients sent to dungeon instances are linearizable
// (github.com/anishathalye/porcupine): every acknowledged attack took effect exactly once, at one
// point between its request and its answer, on the state the previous one left; an attack that got
// no answer may or may not have taken effect, once. A lost acknowledged write, a second effect of
// one request or a stale read all make a history non-linearizable.
package linear

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one command as a client saw it.
type Op struct {
	Instance string
	Client   int
	Call     time.Time
	Return   time.Time // zero: no answer (outcome unknown)
	Status   bool      // a read ({"type":"status"}) instead of an attack
	OK       bool      // the answer was ok
	Damage   int64     // attack: the damage in the answer
	HP       int64     // the boss's HP in the answer
}

// History collects operations from many goroutines.
type History struct {
	mu  sync.Mutex
	ops []Op
}

// Add records one operation.
func (h *History) Add(op Op) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Len is the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Ops is a copy of the operations recorded so far.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// MinDamage and MaxDamage bound an attack's damage (actor/dungeon, outside enrage).
const (
	MinDamage = 50
	MaxDamage = 99
)

func model(initial int64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{initial} },
		Step: func(state, input, output interface{}) []interface{} {
			hp := state.(int64)
			op := output.(Op)
			switch {
			case op.Return.IsZero(): // unknown: applied once, or not at all
				if op.Status {
					return []interface{}{hp}
				}
				next := []interface{}{hp}
				for d := int64(MinDamage); d <= MaxDamage && d <= hp; d++ {
					next = append(next, hp-d)
				}
				return next
			case !op.OK: // refused: no effect
				return []interface{}{hp}
			case op.Status:
				if op.HP == hp {
					return []interface{}{hp}
				}
			default:
				if op.HP == hp-op.Damage {
					return []interface{}{op.HP}
				}
			}
			return nil
		},
		DescribeOperation: func(input, output interface{}) string {
			op := output.(Op)
			switch {
			case op.Return.IsZero():
				return "attack → no answer"
			case op.Status:
				return fmt.Sprintf("status → hp %d", op.HP)
			case !op.OK:
				return "attack → refused"
			}
			return fmt.Sprintf("attack → -%d, hp %d", op.Damage, op.HP)
		},
		DescribeState: func(state interface{}) string { return fmt.Sprintf("hp %d", state.(int64)) },
	}
	return nm.ToModel()
}

// Result of a check.
type Result struct {
	Instances, Ops int
	Failed         []string // instances whose history is not linearizable
	Unknown        []string // instances the checker gave up on (timeout)
	Visualization  string   // HTML file of porcupine's visualisation of the first failure
}

// Check checks every instance's history separately. initialHP is each instance's HP before its
// first operation. On a failure it writes porcupine's HTML visualisation into dir.
func (h *History) Check(initialHP map[string]int64, timeout time.Duration, dir string) (Result, error) {
	h.mu.Lock()
	byInst := map[string][]porcupine.Operation{}
	for _, op := range h.ops {
		ret := int64(math.MaxInt64)
		if !op.Return.IsZero() {
			ret = op.Return.UnixNano()
		}
		byInst[op.Instance] = append(byInst[op.Instance], porcupine.Operation{ClientId: op.Client, Input: op.Instance,
			Call: op.Call.UnixNano(), Output: op, Return: ret})
	}
	h.mu.Unlock()
	var res Result
	ids := make([]string, 0, len(byInst))
	for id := range byInst {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		ops := byInst[id]
		res.Instances++
		res.Ops += len(ops)
		init, ok := initialHP[id]
		if !ok {
			return res, fmt.Errorf("no initial HP for %s", id)
		}
		m := model(init)
		verdict, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
		switch verdict {
		case porcupine.Ok:
		case porcupine.Unknown:
			res.Unknown = append(res.Unknown, id)
		default:
			res.Failed = append(res.Failed, id)
			if res.Visualization == "" && dir != "" {
				path := filepath.Join(dir, "linearizability-"+id+".html")
				if err := os.MkdirAll(dir, 0o755); err == nil && porcupine.VisualizePath(m, info, path) == nil {
					res.Visualization = path
				}
			}
		}
	}
	return res, nil
}
