package clustertest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// deputy attacks the owner of insts as an outsider would before it is killed: a player (the
// players' account) and an operator (the trusted account) send each instance a command whose
// reply subject is the cluster record's key. Neither may land: the cluster record keeps its
// revision, and every instance still answers its own commands.
func (c *cluster) deputy(insts map[string]uint32, run int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := jetstream.New(c.NC)
	if err != nil {
		c.t.Fatal(err)
	}
	control, err := kv.KeyValue(ctx, store.ControlBucket)
	if err != nil {
		c.t.Fatal(err)
	}
	before, err := control.Get(ctx, store.ClusterKey)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := auth.NewUser(c.authDir, auth.Gateway, fmt.Sprintf("mallory-%d", run)); err != nil {
		c.t.Fatal(err)
	}
	conns := map[string]*nats.Conn{}
	for _, who := range []struct {
		role auth.Role
		name string
	}{{auth.Gateway, fmt.Sprintf("mallory-%d", run)}, {auth.Operator, "operator"}} {
		nc, err := c.ConnectAs(who.role, who.name)
		if err != nil {
			c.t.Fatal(err)
		}
		defer nc.Close()
		conns[who.name] = nc
	}
	for name, nc := range conns {
		for id, sh := range insts {
			subj := wire.Subject(sh, id)
			if name != "operator" {
				subj = wire.PlayerSubject(sh, id, name) // a player's own subject
			}
			m := nats.NewMsg(subj)
			m.Reply = "$KV." + store.ControlBucket + "." + store.ClusterKey
			m.Header.Set(wire.HeaderRequestID, "deputy-"+name)
			m.Data = []byte{0x81, 0xa4, 't', 'y', 'p', 'e', 0xa6, 's', 't', 'a', 't', 'u', 's'} // {"type":"status"}
			if err := nc.PublishMsg(m); err != nil {
				c.t.Fatal(err)
			}
		}
		if err := nc.Flush(); err != nil {
			c.t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	after, err := control.Get(ctx, store.ClusterKey)
	if err != nil {
		c.t.Fatal(err)
	}
	if after.Revision() != before.Revision() {
		c.t.Fatalf("the cluster record went from revision %d to %d (%q) after commands aimed the owner's answers at it",
			before.Revision(), after.Revision(), after.Value())
	}
}
