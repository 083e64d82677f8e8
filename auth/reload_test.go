package auth_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/shard/wire"
)

// Issue 35: reloading a failed instance (tickctl instance reload) is an operator's request to the
// node that owns its shard, on tickfence.op: an operator's credential reaches the owner, which
// answers it; a trusted gateway's, a player's, an observer's and a node's may not send one.
func TestOnlyAnOperatorSendsAReload(t *testing.T) {
	e := newEnv(t)
	opNC, _ := e.connect(t, "operator")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := natscmd.NewClient(opNC, shards).Reload(ctx, "d1")
	if err != nil || !r.OK {
		t.Fatalf("operator's reload of d1: %v %+v", err, r.Error)
	}
	if m, _ := r.Result.(map[string]any); m["reloaded"] != false || m["node"] != "n1" {
		t.Fatalf("reload of an instance that runs answered %+v, want reloaded false from n1", r.Result)
	}
	if _, err := auth.NewUser(e.dir, auth.Gateway, "p1"); err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"gateway", "p1", "observer", "node", "effects"} {
		_, c := e.connect(t, who)
		refused(t, c, who+" sends an operator's reload", request(c, wire.OperatorSubject(e.shard, "d1"), `{"type":"reload"}`))
	}
}
