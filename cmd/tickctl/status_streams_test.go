package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store/natskv"
)

// TestStatusShowsEveryStream (issue 36, item 3): tickctl status has a line per stream of the
// cluster — the control bucket, each data partition, blobs, effects and audit — with its leader and
// the replicas current with it or lagging, and says whether a server may be taken down: on three
// servers with R3 buckets every replica is current; with one server stopped, each stream names it
// as offline and status says to wait.
func TestStatusShowsEveryStream(t *testing.T) {
	srvs, err := natsserver.StartCluster(3, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		for i, s := range srvs {
			if i != 2 || !stopped {
				s.Stop()
			}
		}
	})
	url := srvs[0].ClientURL() + "," + srvs[1].ClientURL()
	if _, stderr, code := runBin(t, nil, "cluster", "init", "--replicas", "3", "--partitions", "2", "--shards", "8", "--nats", url); code != 0 {
		t.Fatalf("cluster init: exit %d: %s", code, stderr)
	}
	want := []string{"KV_tickfence-control", "KV_tickfence-data-e1-p0", "KV_tickfence-data-e1-p1", natskv.BlobStream, "tickfence-effects", "tickfence-audit"}
	status := func(until func(string) bool) string {
		t.Helper()
		var out string
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
			stdout, stderr, code := runBin(t, nil, "status", "--nats", url)
			if code != 0 {
				t.Fatalf("status: exit %d: %s", code, stderr)
			}
			if out = stdout; until(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("status never showed what was expected:\n%s", out)
			}
		}
	}
	out := status(func(s string) bool { return strings.Contains(s, "safe to take one server down") })
	for _, name := range want {
		// STREAM HOLDS REPLICAS LEADER CURRENT LAGGING: three current, none lagging.
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+\S+( p\d)?\s+3\s+s\d\s+s\d,s\d,s\d\s+-$`)
		if !re.MatchString(out) {
			t.Errorf("no line for %s with 3 replicas, its leader and all current:\n%s", name, out)
		}
	}
	srvs[2].Stop()
	stopped = true
	out = status(func(s string) bool {
		return strings.Count(s, "s2 (offline)") == len(want) && strings.Contains(s, "wait before taking a server down")
	})
	t.Logf("with s2 stopped:\n%s", out)
	stdout, _, code := runBin(t, nil, "status", "--json", "--nats", url)
	var js struct {
		Streams   []natskv.StreamStatus `json:"streams"`
		StreamsOK bool                  `json:"streams_ok"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &js) != nil || js.StreamsOK || len(js.Streams) != len(want) {
		t.Errorf("status --json with s2 stopped: exit %d, %+v", code, js)
	}
}
