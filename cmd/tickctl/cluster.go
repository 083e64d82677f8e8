package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/tickfence/tickfence/clusterinit"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// tickctl cluster init: the admin bootstrap (package clusterinit, DESIGN 9: only admin shapes
// storage). Nodes on their own credentials make no bucket or stream; this makes them.

// clusterOpts are cluster init's own flags (0: not given).
var clusterOpts struct {
	shards, partitions, replicas uint
	history                      int64
}

func init() {
	flagDefs = append(flagDefs,
		flagDef{"shards", func(fs *flag.FlagSet, _ *globals) {
			fs.UintVar(&clusterOpts.shards, "shards", 0, "shard count of the new cluster (`N`, default 256; fixed once created: an existing\n"+
				"cluster with another count is an error)")
		}},
		flagDef{"partitions", func(fs *flag.FlagSet, _ *globals) {
			fs.UintVar(&clusterOpts.partitions, "partitions", 0, "data buckets per epoch (`P`, 1..shards, default 1; fixed once created)")
		}},
		flagDef{"replicas", func(fs *flag.FlagSet, _ *globals) {
			fs.UintVar(&clusterOpts.replicas, "replicas", 0, "replicas of every bucket and stream (`R`: 1, 3 or 5, default 1; 3 and 5 need a JetStream\n"+
				"cluster of at least as many servers; fixed once created)")
		}},
		flagDef{"data-history", func(fs *flag.FlagSet, _ *globals) {
			fs.Int64Var(&clusterOpts.history, "data-history", 1, "revisions kept per key in the data buckets (`N`, default 1; fault tests keep every one)")
		}},
	)
}

// clusterInitVerb is `tickctl cluster init`.
var clusterInitVerb = &verb{path: "cluster init", args: "[--shards N] [--partitions P] [--replicas R]", setup: true,
	flags: []string{"shards", "partitions", "replicas", "data-history"}, timeout: 2 * time.Minute,
	short: "make the cluster's buckets and streams (admin.creds): the control bucket, the cluster record,\n" +
		"the data buckets, blobs, the effects and audit streams; nodes on credentials make none",
	long: "Run it once, with admin credentials, before the first node starts on a server that enforces the\n" +
		"roles (tickd server --auth): nodes there may not create, update or delete streams, and a node that\n" +
		"finds no cluster says to run this. It is idempotent: each part is created if it is missing and\n" +
		"checked if it exists (a second run changes nothing; on a cluster made by older nodes it makes the\n" +
		"live epoch's data buckets refuse roll-ups; an effects stream with fewer replicas than the cluster's\n" +
		"or a duplicate window under 10 minutes is updated in place, one in memory or on other subjects is\n" +
		"refused). The shape flags given must match an existing\n" +
		"cluster's. tickd with its embedded server, or without credentials, does this by itself.",
	check: func(_ *globals, _ []string) error {
		if clusterOpts.history < 1 {
			return usageError{fmt.Sprintf("--data-history must be at least 1, got %d", clusterOpts.history)}
		}
		c := store.DefaultCluster()
		for _, f := range []struct {
			v   uint
			dst *uint32
		}{{clusterOpts.shards, &c.Shards}, {clusterOpts.partitions, &c.Partitions}, {clusterOpts.replicas, &c.Replicas}} {
			if f.v > 1<<31 {
				return usageError{fmt.Sprintf("%d is out of range", f.v)}
			}
			if f.v != 0 {
				*f.dst = uint32(f.v)
			}
		}
		if err := c.Validate(); err != nil {
			return usageError{err.Error()}
		}
		return nil
	},
	run: func(ctx context.Context, c *cli, _ []string) error { return c.clusterInit(ctx) }}

func (c *cli) clusterInit(ctx context.Context) error {
	o := clusterinit.Options{Shards: uint32(clusterOpts.shards), Partitions: uint32(clusterOpts.partitions), Replicas: uint32(clusterOpts.replicas),
		Require: coordinator.Require{Shards: clusterOpts.shards != 0, Partitions: clusterOpts.partitions != 0, Replicas: clusterOpts.replicas != 0},
		History: clusterOpts.history}
	if !c.g.json {
		fmt.Fprintf(c.out, "cluster init on %s:\n", c.nc.ConnectedUrlRedacted())
		o.Progress = func(s natskv.Step) {
			note := ""
			if s.Note != "" {
				note = "  (" + s.Note + ")"
			}
			fmt.Fprintf(c.out, "  %-8s %-15s %s%s\n", s.State, s.What, s.Name, note)
		}
	}
	res, err := clusterinit.Init(ctx, c.nc, o)
	if err != nil {
		return fmt.Errorf("cluster init: %w", err)
	}
	if c.g.json {
		return c.printJSON(map[string]any{"cluster": res.Cluster, "changed": res.Changed(), "steps": res.Steps})
	}
	what := "made"
	if !res.Changed() {
		what = "already initialised, nothing changed"
	}
	fmt.Fprintf(c.out, "cluster: %s, epoch %d (%s); nodes on credentials can start\n", shape(res.Cluster), res.Cluster.Epoch, what)
	if c.g.creds == "" {
		fmt.Fprintln(os.Stderr, "tickctl: note: no --creds: fine on a server without the roles; with them, cluster init needs admin.creds")
	}
	return nil
}
