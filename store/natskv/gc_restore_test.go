package natskv_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tickfence/tickfence/internal/natsserver"
	"github.com/tickfence/tickfence/store"
)

// TestGCDuringRestoreDeletesRestoredBlob: a blob the backup's record points at is still in
// the Object Store but old and unreferenced in the live epoch (the instance moved on to a small
// state). A gc whose listing precedes the restore's re-upload and whose reference scan reads the
// still-current epoch E deletes it — after the restore uploaded it again — and epoch E+1 then
// holds a record pointing at a missing blob.
// A gc that runs while a restore is putting its backup's blobs back (a cron job, an operator)
// must not delete a blob the restored epoch is about to point at: it refuses while the restore
// holds its claim, and rechecks the epoch and each object before deleting.
func TestGCDuringRestoreNeverDeletesARestoredBlob(t *testing.T) {
	ctx := context.Background()
	srv, err := natsserver.Start(natsserver.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	op1, gcer := openOn(t, srv), openOn(t, srv)
	const shards = 1024 // the reference scan takes a while, as on a real cluster
	if _, err := op1.Bootstrap(ctx, store.Cluster{Shards: shards, Partitions: 1, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	a := store.Assignment{Owner: "A", Session: "a1", Grant: "1.1"}
	tok, err := op1.Assign(ctx, 1, 3, a, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := store.Grant{Epoch: 1, Shard: 3, Token: tok, Assignment: a}
	id := ""
	for i := 0; id == "" || store.ShardOf(id, shards) != 3; i++ {
		id = fmt.Sprintf("i%d", i)
	}
	if _, err := op1.Create(ctx, g, id, store.Record{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("blob"), store.BlobThreshold/4+10)
	if _, err := op1.Write(ctx, g, id, store.Record{Kind: "k", Tick: 2, State: big}); err != nil {
		t.Fatal(err)
	}
	b, err := op1.Backup(ctx, nil)
	if err != nil || len(b.Blobs) != 1 {
		t.Fatalf("backup: %d blobs, %v", len(b.Blobs), err)
	}
	if _, err := op1.Write(ctx, g, id, store.Record{Kind: "k", Tick: 3, State: []byte("small")}); err != nil {
		t.Fatal(err)
	}
	const grace = 500 * time.Millisecond
	time.Sleep(grace + 200*time.Millisecond) // the blob is now older than the grace period

	gcDone := make(chan store.GCResult, 1)
	var gcStart, gcEnd time.Time
	_, err = op1.Restore(ctx, b, store.RestoreOptions{Operator: "op1", FromEpoch: 1, Step: func(s string) error {
		switch s {
		case "blobs": // a gc (tickctl gc, e.g. from cron) starts just before the re-upload
			gcStart = time.Now()
			go func() {
				res, err := gcer.CollectBlobs(ctx, grace, false)
				if err != nil && !strings.Contains(err.Error(), "restore") {
					t.Errorf("gc: %v", err)
				}
				t.Logf("gc: %v", err)
				gcEnd = time.Now()
				gcDone <- res
			}()
			time.Sleep(20 * time.Millisecond)
		case "epoch":
			res := <-gcDone
			t.Logf("gc ran %v, result %+v", gcEnd.Sub(gcStart), res)
			gcDone <- res
		}
		return nil
	}})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	if r, _, err := op1.Load(ctx, 2, 3, id); err != nil || !bytes.Equal(r.State, big) {
		t.Fatalf("restored epoch 2: %d bytes, %v; want the backed-up %d-byte state", len(r.State), err, len(big))
	}
}
