package clustertest_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSigtermWithoutServer (issue 36, item 6): the node's only NATS server dies, then the node
// gets SIGTERM. It cannot hand anything off or flush anything, so it exits within its
// --shutdown-timeout (not after 41 s: an orchestrator's grace is 30 s, then SIGKILL), says once
// and truly why its shards were not handed off (no server reachable), and logs no shard as lost to
// another owner.
func TestSigtermWithoutServer(t *testing.T) {
	const timeout = 3 * time.Second
	c := newCluster(t)
	n1 := c.node("n1", "--demo", "20", "--shutdown-timeout", timeout.String())
	c.waitState("n1 owns instances", 60*time.Second, owns("n1", 1))
	c.Server.Kill()
	waitLog(t, n1, "the node's connections lost", 0, 10*time.Second, func(m map[string]any) bool {
		return m["msg"] == "NATS disconnected" && m["connection"] == "store"
	})
	// Its lease runs out meanwhile: the node self-fences, and its shards try to rebuild.
	time.Sleep(2 * lease)
	from := n1.LineCount()
	start := time.Now()
	signal(t, n1, syscall.SIGTERM)
	select {
	case <-n1.Exited():
	case <-time.After(60 * time.Second):
		t.Fatal("n1 did not exit within 60 s of SIGTERM")
	}
	took := time.Since(start)
	t.Logf("SIGTERM with the server dead → exit after %v (--shutdown-timeout %v)", took.Round(time.Millisecond), timeout)
	if took > timeout+time.Second {
		t.Errorf("exit %v after SIGTERM; want within --shutdown-timeout %v (+1 s)", took.Round(time.Millisecond), timeout)
	}
	var summaries []map[string]any
	for _, l := range n1.Lines(from) {
		b, _ := json.Marshal(l)
		if l["reason"] == "stale_owner" || strings.Contains(fmt.Sprint(l["err"]), "stale_owner") {
			t.Errorf("a shard logged as lost to another owner, which it was not: %s", b)
		}
		if l["level"] == "ERROR" && l["msg"] == "shard stopped: its actors no longer tick" {
			t.Errorf("a shard stop logged as an error: %s", b)
		}
		if strings.Contains(fmt.Sprint(l["msg"]), "not handed off") {
			summaries = append(summaries, l)
		}
	}
	if len(summaries) != 1 {
		t.Fatalf("%d lines say what was not handed off; want one: %v", len(summaries), summaries)
	}
	s := summaries[0]
	if s["shards"] == nil || fmt.Sprint(s["shards"]) == "0" {
		t.Errorf("the summary names no shard: %v", s)
	}
	if cause := fmt.Sprint(s["cause"]); !strings.Contains(cause, "no NATS server reachable") {
		t.Errorf("the summary's cause is %q; want it to say that no NATS server was reachable: %v", cause, s)
	}
}
