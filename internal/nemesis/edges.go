package nemesis

import (
	"fmt"
	"sync/atomic"
)

// EdgeCounts is what the behaviours at the edges of exactly-once did in a run (issue 34): the
// grower (oversize.go), the crowd (crowd.go), re-created IDs (recreate.go) and coordinator
// stalls (stall.go).
type EdgeCounts struct {
	Grows, GrowsTimed, GrowsTooLarge int // grows sent, of them timed with a retransmission, answered too_large
	TooLarge                         int // adds answered too_large (each a violation)
	Crowds, CrowdClients, CrowdAgain int // crowds, their clients, answered commands they sent again
	Forgotten                        int // retransmissions answered answer_forgotten (their sessions let go of)
	Recreated, Echoes, EchoTries     int // IDs created again; at the revision an earlier life began at (of tries)
	Stalls, Bounces                  int // coordinator stalls; shards moved away and back during one
}

func (e EdgeCounts) String() string {
	return fmt.Sprintf("edges: %d grows (%d with a retransmission, %d too_large), %d adds too_large; %d crowds of %d clients (%d answered commands sent again, %d answer_forgotten); %d IDs created again (%d at an earlier life's revision, of %d tries); %d coordinator stalls (%d shards bounced)",
		e.Grows, e.GrowsTimed, e.GrowsTooLarge, e.TooLarge, e.Crowds, e.CrowdClients, e.CrowdAgain, e.Forgotten, e.Recreated, e.Echoes, e.EchoTries, e.Stalls, e.Bounces)
}

func (e *EdgeCounts) add(o EdgeCounts) {
	e.Grows += o.Grows
	e.GrowsTimed += o.GrowsTimed
	e.GrowsTooLarge += o.GrowsTooLarge
	e.TooLarge += o.TooLarge
	e.Crowds += o.Crowds
	e.CrowdClients += o.CrowdClients
	e.CrowdAgain += o.CrowdAgain
	e.Forgotten += o.Forgotten
	e.Recreated += o.Recreated
	e.Echoes += o.Echoes
	e.EchoTries += o.EchoTries
	e.Stalls += o.Stalls
	e.Bounces += o.Bounces
}

type edgeCounters struct {
	grows, growsTimed, growsTooLarge, tooLarge atomic.Int64
	crowds, crowdClients, crowdAgain           atomic.Int64
	forgotten                                  atomic.Int64
	recreated, echoes, echoTries               atomic.Int64
	stalls, bounces                            atomic.Int64
}

func (e *edgeCounters) counts() EdgeCounts {
	return EdgeCounts{Grows: int(e.grows.Load()), GrowsTimed: int(e.growsTimed.Load()), GrowsTooLarge: int(e.growsTooLarge.Load()),
		TooLarge: int(e.tooLarge.Load()), Crowds: int(e.crowds.Load()), CrowdClients: int(e.crowdClients.Load()),
		CrowdAgain: int(e.crowdAgain.Load()), Forgotten: int(e.forgotten.Load()), Recreated: int(e.recreated.Load()), Echoes: int(e.echoes.Load()),
		EchoTries: int(e.echoTries.Load()), Stalls: int(e.stalls.Load()), Bounces: int(e.bounces.Load())}
}
