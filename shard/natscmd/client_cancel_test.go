package natscmd_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/shard/natscmd"
)

// A caller whose context has already ended must not have its command sent (before the change,
// nats.go's RequestMsgWithContext checked ctx.Err() before publishing).
func TestExecWithAnEndedContextSendsNothing(t *testing.T) {
	cnc, onc := clientConns(t)
	id := "cancelled-1"
	attempts := fakeOwner(t, onc, id, func(int, *nats.Msg) ([]byte, time.Duration) { return okWith("applied"), 0 })
	c := natscmd.NewClient(cnc, clientShards)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 20 {
		_, st, err := c.Exec(ctx, id, "", attack, false)
		if err == nil {
			t.Logf("Exec with a cancelled ctx returned OK=%v (the command was applied)", st.OK)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if n := len(attempts()); n != 0 {
		t.Fatalf("the owner received %d commands from 20 Exec calls whose context was already cancelled; want 0", n)
	}
}
