package natsserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestGracefulStopMovesLeadersFirst (issue 36, item 3): a server of a JetStream cluster that leads
// streams and stops gracefully hands every leadership to the other servers before lame duck mode,
// and a client connected to it meanwhile keeps being answered (its requests reach the new leaders)
// until it is moved; Health is ready on a formed cluster, says stopping once the stop began, and
// not ready on a server that lost the others (no meta leader).
func TestGracefulStopMovesLeadersFirst(t *testing.T) {
	srvs, err := StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopped := make([]bool, 3)
	t.Cleanup(func() {
		for i, s := range srvs {
			if !stopped[i] {
				s.Stop()
			}
		}
	})
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.ClientURL())
	}
	nc, err := nats.Connect(strings.Join(urls, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"A", "B", "C"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Replicas: 3}); err != nil {
			t.Fatal(err)
		}
		// All on s0, so that its stop has leaders to move.
		if err := stepDownTo(ctx, nc, js, name, "s0"); err != nil {
			t.Fatal(err)
		}
	}
	waitReady(t, srvs...)
	l, err := srvs[0].Led()
	if err != nil || len(l.Streams) != 3 {
		t.Fatalf("s0 leads %v (%v); want the three streams", l, err)
	}

	// A client of s0 alone publishes through the stop.
	c0, err := nats.Connect(srvs[0].ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c0.Close()
	js0, _ := jetstream.New(c0)
	done := make(chan StopReport)
	go func() {
		rep, err := srvs[0].GracefulStop(10 * time.Second)
		if err != nil {
			t.Errorf("graceful stop: %v", err)
		}
		done <- rep
	}()
	for wait := time.Now().Add(time.Second); ; time.Sleep(10 * time.Millisecond) {
		h := srvs[0].Health()
		if !h.Ready && h.Status == "stopping" {
			break
		}
		if time.Now().After(wait) {
			t.Errorf("health of a stopping server: %+v", h)
			break
		}
	}
	var rep StopReport
	acked := 0
	for waiting := true; waiting; {
		select {
		case rep = <-done:
			waiting = false
		default:
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			if _, err := js0.Publish(pctx, "A.x", []byte("x")); err == nil {
				acked++
			}
			pcancel()
		}
	}
	stopped[0] = true
	if rep.Moved < 3 || rep.Left.Assets() != 0 {
		t.Errorf("stop report %+v: want the three leaderships moved before lame duck mode", rep)
	}
	if acked == 0 {
		t.Errorf("no publish of s0's client acknowledged while s0 stopped")
	}
	t.Logf("graceful stop: %d leaderships moved in %v, lame duck %v; %d publishes acknowledged meanwhile",
		rep.Moved, rep.MovedIn.Round(time.Millisecond), rep.LameDuck.Round(time.Millisecond), acked)
	for _, name := range []string{"A", "B", "C"} {
		info, err := stream(ctx, js, name)
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == "s0" {
			t.Errorf("stream %s after s0 stopped: %+v %v", name, info, err)
		}
	}
	// s1 alone of three: no meta leader, not ready, and it says why.
	srvs[2].Stop()
	stopped[2] = true
	deadline := time.Now().Add(20 * time.Second)
	for h := srvs[1].Health(); h.Ready; h = srvs[1].Health() {
		if time.Now().After(deadline) {
			t.Fatalf("a server that lost both others is still ready: %+v", h)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if h := srvs[1].Health(); len(h.Errors) == 0 {
		t.Errorf("not ready without saying why: %+v", h)
	}
}

func stream(ctx context.Context, js jetstream.JetStream, name string) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

// stepDownTo asks a stream's leader to step down in favour of server until it leads it.
func stepDownTo(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, name, server string) error {
	for {
		info, err := stream(ctx, js, name)
		if err == nil && info.Cluster != nil && info.Cluster.Leader == server {
			return nil
		}
		if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
			_, _ = nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+name, []byte(`{"placement":{"preferred":"`+server+`"}}`))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitReady waits until every server says it is ready.
func waitReady(t *testing.T, srvs ...*Server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range srvs {
		for h := s.Health(); !h.Ready; h = s.Health() {
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready: %+v", s.Name(), h)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
