package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"

	"github.com/tickfence/tickfence/store"
)

// backup writes the latest value of every key of the current epoch's data buckets to a file.
func (c *cli) backup(ctx context.Context, path string) error {
	pr := newProgress(c.g.json)
	b, err := store.TakeBackup(ctx, c.st, func(done int) { pr.show("backing up: %d keys", done) })
	pr.clear()
	if err != nil {
		return err
	}
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	return c.done(map[string]any{"file": path, "epoch": b.Cluster.Epoch, "keys": len(b.Entries), "bytes": len(data),
		"shards": b.Cluster.Shards, "partitions": b.Cluster.Partitions, "replicas": b.Cluster.ReplicasOr1()},
		"backed up epoch %d (%s): %d keys, %d bytes, to %s", b.Cluster.Epoch, shape(b.Cluster), len(b.Entries), len(data), path)
}

// restore makes a backup the state of a new epoch (DESIGN 6): it seals the current epoch, restores
// into the next, rewrites every shard key there, and only then bumps cluster.epoch. Nodes follow
// the new epoch with new sessions; the coordinator assigns every shard afresh.
func (c *cli) restore(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var b store.Backup
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("%s: not a tickctl backup: %w", path, err)
	}
	if !c.g.yes {
		return usageError{fmt.Sprintf("restore replaces the state of every instance with the backup of epoch %d (%d keys, %s); "+
			"it seals epoch %d for good. Run again with --yes to do it", b.Cluster.Epoch, len(b.Entries), shape(b.Cluster), c.cl.Epoch)}
	}
	// FromEpoch: the epoch the operator was told would be sealed. If another restore finished
	// meanwhile, this one is refused instead of restoring again over the live epoch.
	pr := newProgress(c.g.json)
	cl, err := store.Restore(ctx, c.st, b, store.RestoreOptions{Operator: operator(), Takeover: c.g.takeover,
		FromEpoch: c.cl.Epoch,
		Progress:  func(done, total int) { pr.show("restoring: %d/%d keys", done, total) }})
	pr.clear()
	if errors.Is(err, store.ErrRestoreClaimed) {
		return fmt.Errorf("%w (if it crashed: --takeover finishes it with this backup; restore --undo releases it if it sealed nothing)", err)
	}
	if err != nil {
		return err
	}
	return c.done(map[string]any{"file": path, "sealed_epoch": c.cl.Epoch, "epoch": cl.Epoch, "keys": len(b.Entries)},
		"restored %d keys into epoch %d; epoch %d is sealed; nodes move to epoch %d and the coordinator assigns every shard",
		len(b.Entries), cl.Epoch, c.cl.Epoch, cl.Epoch)
}

// undoRestore releases the claim of a crashed restore that sealed nothing yet.
func (c *cli) undoRestore(ctx context.Context) error {
	if !c.g.yes {
		return usageError{"restore --undo releases another operator's restore claim; run again with --yes to do it"}
	}
	held, err := store.AbandonRestore(ctx, c.st)
	if err != nil {
		return err
	}
	return c.done(map[string]any{"operator": held.Operator, "epoch": held.Epoch, "undone": true},
		"undid %s's restore into epoch %d: epoch %d carries on", held.Operator, held.Epoch, held.FromEpoch)
}

// operator names who runs a restore, for the claim another operator sees.
func operator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s (tickctl pid %d)", name, host, os.Getpid())
}

// shape is a cluster's shards, partitions and replicas (a backup restores only into its shape).
func shape(cl store.Cluster) string {
	return fmt.Sprintf("%d shards, %d partitions, %d replicas", cl.Shards, cl.Partitions, cl.ReplicasOr1())
}
