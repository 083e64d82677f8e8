package natsserver

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A graceful stop and a readiness signal for the servers of a JetStream cluster (issue 36): a
// rolling restart takes one server down at a time, the way an operator upgrades, and must leave
// no request unanswered; the next server may go only once the restarted one has caught up.

// Led is what a server of a JetStream cluster leads: the meta group, and the streams and
// consumers ("account > stream", "account > stream > consumer") whose Raft group it leads.
type Led struct {
	Meta      bool     `json:"meta,omitempty"`
	Streams   []string `json:"streams,omitempty"`
	Consumers []string `json:"consumers,omitempty"`
}

// Assets is how many streams and consumers it leads.
func (l Led) Assets() int { return len(l.Streams) + len(l.Consumers) }

func (l Led) String() string {
	parts := []string{fmt.Sprintf("%d streams %v", len(l.Streams), l.Streams), fmt.Sprintf("%d consumers %v", len(l.Consumers), l.Consumers)}
	if l.Meta {
		parts = append(parts, "the meta group")
	}
	return strings.Join(parts, ", ")
}

// Led reports what this server leads now (nothing standalone: there is no group to lead).
func (s *Server) Led() (Led, error) {
	var l Led
	if !s.JetStreamIsClustered() {
		return l, nil
	}
	l.Meta = s.JetStreamIsLeader()
	info, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, Config: true})
	if err != nil {
		return l, err
	}
	name := s.Name()
	for _, a := range info.AccountDetails {
		for _, st := range a.Streams {
			if st.Cluster != nil && st.Cluster.Leader == name && st.Config != nil && st.Config.Replicas > 1 {
				l.Streams = append(l.Streams, a.Id+" > "+st.Name)
			}
			for _, c := range st.Consumer {
				if c != nil && c.Cluster != nil && c.Cluster.Leader == name && len(c.Cluster.Replicas) > 0 {
					l.Consumers = append(l.Consumers, a.Id+" > "+st.Name+" > "+c.Name)
				}
			}
		}
	}
	sort.Strings(l.Streams)
	sort.Strings(l.Consumers)
	return l, nil
}

// MoveLeadersOff asks every replicated stream and consumer this server leads to hand its
// leadership to a current follower (a Raft leadership transfer: no election timeout, nothing
// refused meanwhile) and waits until it leads none, asking again every 250 ms, until ctx ends. It
// returns what it still leads then. JetStream keeps running here: this server stays a follower
// of each group, so every stream keeps all its replicas while its leader moves. The meta group's
// leadership is left to the lame duck mode (it moves it first thing).
func (s *Server) MoveLeadersOff(ctx context.Context) (moved int, left Led, err error) {
	asked := map[string]bool{}
	for {
		l, err := s.Led()
		if err != nil {
			return len(asked), l, err
		}
		if l.Assets() == 0 {
			return len(asked), l, nil
		}
		for _, name := range l.Streams {
			acc, stream, _ := strings.Cut(name, " > ")
			_ = s.JetStreamStepdownStream(acc, stream)
			asked[name] = true
		}
		for _, name := range l.Consumers {
			parts := strings.SplitN(name, " > ", 3)
			if len(parts) == 3 {
				_ = s.JetStreamStepdownConsumer(parts[0], parts[1], parts[2])
				asked[name] = true
			}
		}
		select {
		case <-ctx.Done():
			l, err := s.Led()
			if err == nil && l.Assets() > 0 {
				err = ctx.Err()
			}
			return len(asked), l, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// StopReport says what a graceful stop did.
type StopReport struct {
	Moved     int           // stream and consumer leaderships handed off before lame duck mode
	Left      Led           // what it still led when lame duck mode began (it transfers them itself)
	MovedIn   time.Duration // how long moving them took
	LameDuck  time.Duration // how long lame duck mode took, until the server was down
	Clustered bool
}

// GracefulStop stops the server the way a rolling restart needs: on a JetStream cluster it first
// moves the leadership of every stream and consumer it leads to the other servers (MoveLeadersOff,
// for at most moveWithin), then enters lame duck mode (nats-server's LameDuckShutdown): it stops
// accepting clients, tells its clients and routes it is going (clients of a cluster that
// advertises its servers are told the others' URLs), moves any leadership still here (the meta
// group's), stops JetStream here, and after Config.LameDuck's grace period closes its clients one
// by one over the rest of Config.LameDuck, so they reconnect to the other servers a few at a time.
// Until a client is closed, its requests still reach the other servers' stream leaders over the
// routes. A standalone server has nowhere to send anyone: it stops at once (Stop).
func (s *Server) GracefulStop(moveWithin time.Duration) (StopReport, error) {
	s.stopping.Store(true)
	var rep StopReport
	if !s.JetStreamIsClustered() {
		s.Stop()
		return rep, nil
	}
	rep.Clustered = true
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), moveWithin)
	moved, left, err := s.MoveLeadersOff(ctx)
	cancel()
	rep.Moved, rep.Left, rep.MovedIn = moved, left, time.Since(start)
	start = time.Now()
	s.LameDuckShutdown()
	s.WaitForShutdown()
	rep.LameDuck = time.Since(start)
	return rep, err
}

// Health is a server's readiness for a rolling restart: Ready when this server is up, not
// stopping, in contact with the JetStream meta leader and current with it, and every stream and
// consumer it holds a replica of is current (nats-server's full /healthz: not catching up, its
// Raft group healthy). After a restart, the next server may be taken down once the restarted one
// is Ready: every stream it replicates — the control bucket, the data partitions, blobs, effects
// — then has this server's replica current besides the one going down.
type Health struct {
	Ready    bool           `json:"ready"`
	Status   string         `json:"status"` // ok, stopping, or unavailable
	Server   string         `json:"server"`
	Errors   []string       `json:"errors,omitempty"`
	Meta     string         `json:"meta_leader,omitempty"`
	Streams  []StreamHealth `json:"streams,omitempty"`
	Lagging  int            `json:"lagging"`  // streams whose replica here is not current
	Leading  int            `json:"leading"`  // streams led here
	Replicas int            `json:"replicas"` // streams with a replica here
}

// StreamHealth is one stream with a replica on this server.
type StreamHealth struct {
	Account  string `json:"account"`
	Stream   string `json:"stream"`
	Replicas int    `json:"replicas"`
	Leader   string `json:"leader,omitempty"` // "" while it elects one
	Here     string `json:"here"`             // leader or follower
	Current  bool   `json:"current"`          // this server's replica is current
}

// Health checks the server (see Health).
func (s *Server) Health() Health {
	h := Health{Server: s.Name(), Status: "ok"}
	if s.stopping.Load() {
		h.Status = "stopping"
		h.Errors = append(h.Errors, "the server is stopping (lame duck mode): restart it before taking another down")
		return h
	}
	hs := s.Healthz(&server.HealthzOptions{Details: true})
	if hs.Error != "" {
		h.Errors = append(h.Errors, hs.Error)
	}
	for _, e := range hs.Errors {
		h.Errors = append(h.Errors, e.Error)
	}
	if info, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Config: true}); err != nil {
		h.Errors = append(h.Errors, "jetstream: "+err.Error())
	} else {
		if info.Meta != nil {
			h.Meta = info.Meta.Leader
			if s.JetStreamIsClustered() && h.Meta == "" {
				h.Errors = append(h.Errors, "no JetStream meta leader")
			}
		}
		for _, a := range info.AccountDetails {
			for _, st := range a.Streams {
				sh := StreamHealth{Account: a.Id, Stream: st.Name, Replicas: 1, Here: "leader", Current: true}
				if st.Config != nil {
					sh.Replicas = max(st.Config.Replicas, 1)
				}
				if st.Cluster != nil {
					sh.Leader = st.Cluster.Leader
					if sh.Leader != s.Name() {
						sh.Here = "follower"
					}
					// A follower that has not heard from a leader yet (just restarted) calls
					// itself current (nats-server's check needs leader contact only once it
					// knows one): current here means a leader is known and heard from lately,
					// and nothing is left to catch up.
					sh.Current = s.JetStreamIsStreamCurrent(a.Id, st.Name) && (sh.Replicas == 1 || sh.Leader != "")
				}
				if !sh.Current {
					h.Lagging++
				}
				if sh.Here == "leader" {
					h.Leading++
				}
				h.Streams = append(h.Streams, sh)
			}
		}
	}
	slices.SortFunc(h.Streams, func(a, b StreamHealth) int { return strings.Compare(a.Account+" "+a.Stream, b.Account+" "+b.Stream) })
	h.Replicas = len(h.Streams)
	if h.Lagging > 0 {
		h.Errors = append(h.Errors, fmt.Sprintf("%d streams not current here", h.Lagging))
	}
	if len(h.Errors) > 0 {
		h.Status = "unavailable"
	}
	h.Ready = len(h.Errors) == 0
	return h
}
