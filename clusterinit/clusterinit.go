// Package clusterinit makes a tickfence cluster's storage: the admin bootstrap of DESIGN 9
// ("only admin shapes storage"). With the roles enforced (package auth) no node may create,
// update or delete a stream, so before the first node starts an admin runs
//
//	tickctl --creds DIR/admin.creds cluster init --shards 256 --partitions 1 --replicas 1
//
// which calls Init: the control bucket, the cluster record, the data buckets of its epoch, the
// blobs bucket, the effects stream and the audit stream — each created if it is missing and checked
// if it exists (and repaired where an update can: an effects stream with fewer replicas than the
// cluster's or a short duplicate window is updated). Nodes then open what is there
// (natskv.Options.OpenOnly) and fail with an error naming the command when it is not, or when the
// effects stream is wrongly shaped. A node that runs its own embedded server, or connects
// without credentials, calls Init itself (tickfence.Start): a newcomer's tickd --demo needs no
// step more.
package clusterinit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/coordinator"
	"github.com/tickfence/tickfence/shard/natscmd"
	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/natskv"
)

// Options of Init.
type Options struct {
	// Shards, Partitions and Replicas are the shape of a new cluster (0: store.DefaultCluster's:
	// 256, 1, 1). A cluster that exists keeps its own; Require makes a different value of a part
	// an error (a *coordinator.ShapeError) instead.
	Shards, Partitions, Replicas uint32
	Require                      coordinator.Require
	// Storage of the buckets (default file).
	Storage jetstream.StorageType
	// History is the revisions kept per key in a new epoch's data buckets (default 1).
	History int64
	// Progress, if set, receives each step as it is done (again for each attempt, see Forming).
	Progress func(natskv.Step)
	// FormWait bounds how long Init waits for a JetStream cluster that is still forming (no meta
	// leader yet, not every server known to it: see Forming); default DefaultFormWait.
	FormWait time.Duration
	// Waiting, if set, is told each time Init waits for the cluster to form: the error of the
	// attempt that found it forming, and how long it has waited so far.
	Waiting func(err error, waited time.Duration)
}

// DefaultFormWait is how long Init waits for a forming JetStream cluster unless Options.FormWait
// says otherwise: a new cluster's servers elect a meta leader within seconds of seeing each other.
const DefaultFormWait = 2 * time.Minute

// firstAttempt bounds the first attempt of Init, and each later one gets twice the time of the one
// before, up to lastAttempt: a request the JetStream API drops (sent while the meta group or a new
// stream's group is electing: nothing answers it) fails the attempt instead of waiting out the
// caller's whole context, and the next attempt asks again; an attempt that was only slow leaves
// what it made for the next one, which has longer.
const (
	firstAttempt = 5 * time.Second
	lastAttempt  = 30 * time.Second
)

// Result is what Init found or made.
type Result struct {
	Cluster store.Cluster `json:"cluster"`
	Steps   []natskv.Step `json:"steps"`
}

// Changed says whether Init created or updated anything.
func (r Result) Changed() bool {
	return slices.ContainsFunc(r.Steps, func(s natskv.Step) bool { return s.State != natskv.StepExists })
}

// Init makes (or checks) the storage of the cluster on nc, a connection made with natskv.Connect
// whose user may shape storage (admin.creds, or none on a server without the roles). It is
// idempotent: run again, it changes nothing and reports every part as natskv.StepExists.
// Something there that tickfence would not have made (a stream of the same name capturing other
// subjects, an effects stream in memory, a control bucket without per-message TTL) is an error,
// changed nothing; what an update repairs (an effects stream with fewer replicas than the
// cluster's or a duplicate window under 10 minutes) is updated and reported as natskv.StepUpdated.
//
// A JetStream cluster that is still forming — servers started at the same moment as the nodes,
// no meta leader elected yet, or one that does not know enough servers to place the replicas —
// drops requests or answers them "temporarily unavailable" or "insufficient resources". Init
// then waits (Options.FormWait, telling Options.Waiting) and tries again from the start, with
// backoff: every step is idempotent, so a part made by an attempt that timed out, or by another
// node's Init meanwhile, is found and checked (an equal part made by someone else is success;
// a differently shaped one is still refused).
func Init(ctx context.Context, nc *nats.Conn, o Options) (Result, error) {
	wait := o.FormWait
	if wait <= 0 {
		wait = DefaultFormWait
	}
	start := time.Now()
	backoff, attempt := 250*time.Millisecond, firstAttempt
	for {
		err := waitJetStream(ctx, nc, start.Add(wait))
		var res Result
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, attempt)
			res, err = initOnce(actx, nc, o)
			cancel()
			attempt = min(2*attempt, lastAttempt)
		}
		if err == nil || !Forming(err) || ctx.Err() != nil {
			return res, err
		}
		waited := time.Since(start)
		if waited+backoff > wait {
			return res, fmt.Errorf("the JetStream cluster did not form within %v (no meta leader, or too few servers for the replicas): %w", wait, err)
		}
		if o.Waiting != nil {
			o.Waiting(err, waited)
		}
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// waitJetStream waits (until deadline at most) for the JetStream API to answer: in a cluster, only
// its meta leader answers account info, so an answer means one has been elected. Each request is
// short: one sent while the servers elect is dropped, never answered.
func waitJetStream(ctx context.Context, nc *nats.Conn, deadline time.Time) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(rctx)
		cancel()
		if err == nil || !Forming(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Forming reports whether err is what a JetStream cluster that is still forming answers (or does
// not): a request timed out or found no responder, or the API said JetStream is temporarily
// unavailable, has no leader for the request, lacks the servers or resources to place it yet, or
// the stream is offline. Anything else (a refusal, a shape that is not tickfence's) is an answer.
func Forming(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
		return true
	}
	var ae *jetstream.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode {
		case 10005, // no suitable peers for placement
			10007, // JetStream cluster not assigned to this server
			10008, // JetStream system temporarily unavailable
			10009, // JetStream cluster can not handle request
			10023, // insufficient resources
			10118, // stream is offline
			10194: // stream is offline: reason
			return true
		}
	}
	return false
}

// initOnce is one attempt of Init.
func initOnce(ctx context.Context, nc *nats.Conn, o Options) (Result, error) {
	want := store.DefaultCluster()
	if o.Shards != 0 {
		want.Shards = o.Shards
	}
	if o.Partitions != 0 {
		want.Partitions = o.Partitions
	}
	if o.Replicas != 0 {
		want.Replicas = o.Replicas
	}
	if err := want.Validate(); err != nil {
		return Result{}, err
	}
	var res Result
	step := func(s natskv.Step) {
		res.Steps = append(res.Steps, s)
		if o.Progress != nil {
			o.Progress(s)
		}
	}
	st, err := natskv.Open(nc, natskv.Options{Storage: o.Storage, History: o.History, Progress: step})
	if err != nil {
		return Result{}, err
	}
	defer st.Close()
	c, err := st.Init(ctx, want, func(got store.Cluster) error { return coordinator.CheckShape(got, want, o.Require) })
	if err != nil {
		return res, err
	}
	res.Cluster = c
	js, err := jetstream.New(nc)
	if err != nil {
		return res, err
	}
	replicas := int(c.ReplicasOr1())
	if err := ensureEffects(ctx, js, replicas, step); err != nil {
		return res, err
	}
	if err := ensureStream(ctx, js, "audit stream", auth.AuditStreamConfig(replicas), step); err != nil {
		return res, err
	}
	return res, nil
}

// ensureEffects makes the effects stream, or checks it, and repairs what an update repairs: a
// stream a consumer made before the cluster (one replica on a 3-server cluster) or one made by hand
// (JetStream's default 2-minute duplicate window) is updated to the cluster's replicas and the
// 10-minute window, keeping its effects. One no update repairs (other subjects, memory storage,
// another retention) is an error naming what to do, changed nothing.
func ensureEffects(ctx context.Context, js jetstream.JetStream, replicas int, step func(natskv.Step)) error {
	const what = "effects stream"
	_, ch, err := natscmd.EnsureEffectsStream(ctx, js, replicas)
	switch {
	case err != nil:
		return err
	case ch.Created:
		cfg := natscmd.EffectsStreamConfig(replicas)
		step(natskv.Step{What: what, Name: cfg.Name, State: natskv.StepCreated, Note: fmt.Sprintf("%d replicas, %v", cfg.Replicas, cfg.Subjects)})
	case len(ch.Repaired) > 0:
		step(natskv.Step{What: what, Name: natscmd.EffectsStream, State: natskv.StepUpdated,
			Note: strings.Join(ch.Repaired, ", ") + " (effects leave their records once it acknowledges them)"})
	default:
		step(natskv.Step{What: what, Name: natscmd.EffectsStream, State: natskv.StepExists})
	}
	return nil
}

// ensureStream creates stream cfg if it is missing, and refuses one of that name that captures
// other subjects.
func ensureStream(ctx context.Context, js jetstream.JetStream, what string, cfg jetstream.StreamConfig, step func(natskv.Step)) error {
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, cfg)
		if err == nil {
			step(natskv.Step{What: what, Name: cfg.Name, State: natskv.StepCreated, Note: fmt.Sprintf("%d replicas, %v", cfg.Replicas, cfg.Subjects)})
			return nil
		}
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("create %s %s: %w", what, cfg.Name, err)
		}
		s, err = js.Stream(ctx, cfg.Name) // made meanwhile: check it
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, cfg.Name, err)
	}
	got := s.CachedInfo().Config
	if !slices.Equal(got.Subjects, cfg.Subjects) {
		return fmt.Errorf("%s %s exists but captures %v, want %v: not made by tickfence (delete it as admin, or use another account)",
			what, cfg.Name, got.Subjects, cfg.Subjects)
	}
	step(natskv.Step{What: what, Name: cfg.Name, State: natskv.StepExists})
	return nil
}
