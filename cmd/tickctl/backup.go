package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/tickfence/tickfence/store/natskv"
)

// backup writes the latest value of every key of the current epoch's data buckets to a file.
func (c *cli) backup(ctx context.Context, path string) error {
	b, err := c.st.Backup(ctx, func(done int) {
		if !c.g.json {
			fmt.Fprintf(os.Stderr, "\rbacking up: %d keys", done)
		}
	})
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
	if !c.g.json {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	return c.done(map[string]any{"file": path, "epoch": b.Cluster.Epoch, "keys": len(b.Entries), "bytes": len(data)},
		"backed up epoch %d: %d keys, %d bytes, to %s", b.Cluster.Epoch, len(b.Entries), len(data), path)
}

// restore makes a backup the state of a new epoch (DESIGN 6): it seals the current epoch, restores
// into the next, rewrites every shard key there, and only then bumps cluster.epoch. Nodes follow
// the new epoch with new sessions; the coordinator assigns every shard afresh.
func (c *cli) restore(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var b natskv.Backup
	if err := json.Unmarshal(data, &b); err != nil {
		return fmt.Errorf("%s: not a tickctl backup: %w", path, err)
	}
	if !c.g.yes {
		return usageError{fmt.Sprintf("restore replaces the state of every instance with the backup of epoch %d (%d keys); "+
			"it seals epoch %d for good. Run again with --yes to do it", b.Cluster.Epoch, len(b.Entries), c.cl.Epoch)}
	}
	cl, err := c.st.Restore(ctx, b, natskv.RestoreOptions{Progress: func(done, total int) {
		if !c.g.json {
			fmt.Fprintf(os.Stderr, "\rrestoring: %d/%d keys", done, total)
		}
	}})
	if err != nil {
		return err
	}
	if !c.g.json {
		fmt.Fprint(os.Stderr, "\r\033[K")
	}
	return c.done(map[string]any{"file": path, "sealed_epoch": c.cl.Epoch, "epoch": cl.Epoch, "keys": len(b.Entries)},
		"restored %d keys into epoch %d; epoch %d is sealed; nodes move to epoch %d and the coordinator assigns every shard",
		len(b.Entries), cl.Epoch, c.cl.Epoch, cl.Epoch)
}
