// Package metrics holds tickfence's Prometheus metrics (names are a contract with dashboards) and
// the tick lateness window of the periodic summary log.
package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tickfence/tickfence/store"
)

// LatencyBuckets run from 50 µs to 1 s, fine enough around 1–5 ms that a 2 ms p99 is visible.
var LatencyBuckets = []float64{
	50e-6, 100e-6, 250e-6, 500e-6, 750e-6,
	1e-3, 1.5e-3, 2e-3, 3e-3, 5e-3, 7.5e-3,
	10e-3, 15e-3, 20e-3, 30e-3, 50e-3, 75e-3,
	100e-3, 150e-3, 200e-3, 300e-3, 500e-3, 750e-3, 1,
}

// Node is the metrics of one tickd node.
type Node struct {
	TicksSkipped   prometheus.CounterFunc
	StateWrites    *prometheus.CounterVec
	Instances      prometheus.Gauge
	ShardsOwned    prometheus.Gauge
	Commands       *prometheus.CounterVec
	CommandSeconds prometheus.Histogram
	// CommandQueueSeconds: how long commands waited in the node's queue before it read them.
	CommandQueueSeconds prometheus.Histogram
	// RepliesRefused: commands dropped unanswered because their reply subject was not an inbox
	// (DESIGN 9: a node never writes where a requester aims it).
	RepliesRefused prometheus.Counter
	ShardStops     *prometheus.CounterVec
	Rotations      prometheus.Counter
	// Admission control: commands admitted and not answered; 1 while new ones are refused busy.
	CommandsPending prometheus.Gauge
	Shedding        prometheus.Gauge
	WriteSeconds    prometheus.Histogram
	WriteBatch      prometheus.Histogram

	// Cluster operation.
	Failovers         prometheus.Counter
	Handoffs          *prometheus.CounterVec
	HandoffPause      prometheus.Histogram
	CoordinatorLeader prometheus.Gauge
	Elections         prometheus.Counter
	LeaseRenewal      prometheus.Histogram
	SelfFenced        prometheus.Counter
	// RideThroughs counts the node lease going unrenewed past TTL minus margin while the node kept
	// ticking on the fence; RidingThrough is 1 while it does (shard/node: Config.RideThrough).
	RideThroughs  prometheus.Counter
	RidingThrough prometheus.Gauge
	LeaseTTL      prometheus.Gauge
	// The leader's view: shards with no live owner, and how long the longest of them has had none.
	ShardsUnowned      prometheus.Gauge
	ShardUnownedMaxAge prometheus.Gauge
	// TickPeriod is one tick's budget: 1 / tick rate.
	TickPeriod prometheus.Gauge

	FramesPublished prometheus.Counter
	FramesDropped   prometheus.Counter
	FramesRefused   prometheus.Counter
	FrameNotices    prometheus.Counter

	EffectsEmitted   prometheus.Counter
	EffectsPublished prometheus.Counter
	EffectsFailed    prometheus.Counter
	EffectsRefused   prometheus.Counter
	EffectsPending   prometheus.GaugeFunc

	// Large state (DESIGN 8): this node's blob uploads, and the leader's collections.
	BlobUploads, BlobUploadBytes, BlobKept prometheus.CounterFunc
	BlobGCRuns                             *prometheus.CounterVec
	BlobGCDeleted, BlobGCDeletedBytes      prometheus.Counter
	BlobGCOrphanChunks                     prometheus.Counter
	BlobGCObjects, BlobGCReferenced        prometheus.Gauge
	BlobGCYoung, BlobGCLastSuccess         prometheus.Gauge
	BlobGCSeconds                          prometheus.Histogram
	// InstancesFailed: instances out of service here because the game's code failed in them
	// (answered instance_failed until reloaded); InstanceFailures counts failures by cause.
	InstancesFailed  prometheus.GaugeFunc
	InstanceFailures *prometheus.CounterVec
	// Life: passivation, wake-ups, ends by the game's logic (lifecycle.go).
	Life *Life

	tickMetrics *tickMetrics // tickfence_ticks_total, the tick histograms, the lateness window
	writes      atomic.Uint64
	skipped     atomic.Pointer[func() uint64]
	fxHeld      atomic.Pointer[func() uint64]
	blobStats   atomic.Pointer[func() store.BlobStats]
	failedNow   atomic.Pointer[func() uint64]
}

var (
	forMu sync.Mutex
	forM  = map[prometheus.Registerer]*Node{}
)

// For returns the metrics registered on reg, registering them the first time: a node, its
// coordinator candidate and its command transport in one process share one set through the
// registerer their configs name. nil: a set registered nowhere (not shared). The set of a
// registerer lives as long as the process.
func For(reg prometheus.Registerer) *Node {
	if reg == nil {
		return newNode(prometheus.NewRegistry())
	}
	forMu.Lock()
	defer forMu.Unlock()
	if m := forM[reg]; m != nil {
		return m
	}
	m := newNode(reg)
	forM[reg] = m
	return m
}

// Forget drops the set For keeps for reg, so that it and what its gauges read (a shard host, an
// engine) can be collected once reg is no longer used: for processes that make a registry per
// short-lived node (the nemesis makes thousands). reg's collectors stay registered on reg.
func Forget(reg prometheus.Registerer) {
	forMu.Lock()
	defer forMu.Unlock()
	delete(forM, reg)
}

// CountPendingEffects makes f the source of tickfence_effects_pending (the shard host's count).
func (m *Node) CountPendingEffects(f func() uint64) { m.fxHeld.Store(&f) }

// CountBlobs makes f the source of tickfence_blob_uploads_total, _upload_bytes_total and
// _kept_total (the store's store.BlobWriter).
func (m *Node) CountBlobs(f func() store.BlobStats) { m.blobStats.Store(&f) }

func (m *Node) blobStat(pick func(store.BlobStats) uint64) func() float64 {
	return func() float64 {
		if f := m.blobStats.Load(); f != nil {
			return float64(pick((*f)()))
		}
		return 0
	}
}

// BlobGCObserve records a successful blob collection finished at now.
func (m *Node) BlobGCObserve(res store.GCResult, now time.Time) {
	m.BlobGCRuns.WithLabelValues("ok").Inc()
	m.BlobGCDeleted.Add(float64(len(res.Deleted)))
	m.BlobGCDeletedBytes.Add(float64(res.DeletedBytes))
	m.BlobGCOrphanChunks.Add(float64(res.OrphanChunks))
	m.BlobGCObjects.Set(float64(res.Objects - len(res.Deleted)))
	m.BlobGCReferenced.Set(float64(res.Referenced))
	m.BlobGCYoung.Set(float64(res.Young))
	m.BlobGCLastSuccess.Set(float64(now.UnixNano()) / 1e9)
}

// CountFailedInstances makes f the source of tickfence_instances_failed (the shard host's count).
func (m *Node) CountFailedInstances(f func() uint64) { m.failedNow.Store(&f) }

// CountSkipped makes f the source of tickfence_ticks_skipped_total (the engine's count).
func (m *Node) CountSkipped(f func() uint64) { m.skipped.Store(&f) }

// newNode registers the node's metrics on reg (never the global registry).
func newNode(reg prometheus.Registerer) *Node {
	m := &Node{
		tickMetrics: newTickMetrics(),
		StateWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickfence_state_writes_total",
			Help: "Fenced state writes by outcome: ok, stale_owner (rejected by the fence), conflict, error."}, []string{"result"}),
		Instances: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_instances",
			Help: "Instances this node is ticking."}),
		ShardsOwned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_shards_owned",
			Help: "Shards this node's session is running."}),
		Commands: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickfence_commands_total",
			Help: "Commands answered, by result: ok, duplicate, or the error code."}, []string{"result"}),
		CommandSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tickfence_command_seconds",
			Help: "Command receipt to answer, the answer sent after the write holding its effect was stored.", Buckets: LatencyBuckets}),
		CommandQueueSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tickfence_command_queue_seconds",
			Help: "How long a command waited in the node's queue, after its connection read it and before the node looked at it (estimated; 0 unless a queue stands).", Buckets: LatencyBuckets}),
		RepliesRefused: prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_command_reply_refused_total",
			Help: "Commands dropped unanswered because their reply subject was not an inbox (_INBOX. or the server's _R_. response subjects): a confused-deputy attempt or a misconfigured client."}),
		ShardStops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickfence_shard_stops_total",
			Help: "Shards this node stopped, by reason: reassigned, stale_owner, handoff, shutdown."}, []string{"reason"}),
		Rotations: prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_token_rotations_total",
			Help: "Token rotations after a write with an unknown outcome; each is followed by a rebuild of the shard."}),
		CommandsPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_commands_pending",
			Help: "Commands admitted and not answered yet (admission control bounds them)."}),
		WriteSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tickfence_state_write_seconds",
			Help: "Fenced state write, sent to acknowledged by the store (accepted writes only).", Buckets: LatencyBuckets}),
		WriteBatch: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tickfence_write_batch_records",
			Help: "Records per atomic batch, with the batch write strategy (one batch in flight per shard).", Buckets: prometheus.ExponentialBuckets(1, 2, 9)}),
		Shedding: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_admission_shedding",
			Help: "1 while the node refuses a share of new commands with busy: an answer slower than the admission target for a whole interval, or ticks running late, cut the share admitted."}),
	}
	m.TicksSkipped = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tickfence_ticks_skipped_total",
		Help: "Ticks skipped by the overrun policy (a worker more than MaxCatchUp periods late)."}, func() float64 {
		if f := m.skipped.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	m.Failovers = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_failovers_total",
		Help: "Shards this node, as coordinator, reassigned because their owner's lease was gone."})
	m.Handoffs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickfence_handoffs_total",
		Help: "Graceful moves this node, as coordinator, completed: ok (released in time), timeout (reassigned anyway), aborted."}, []string{"result"})
	m.HandoffPause = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tickfence_handoff_pause_seconds",
		Help: "Ticks-missed time of an instance received by a graceful move: old owner's last tick to its first tick here.", Buckets: LatencyBuckets})
	m.CoordinatorLeader = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_coordinator_leader",
		Help: "1 while this node holds the coordinator lease."})
	m.Elections = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_coordinator_elections_total",
		Help: "Times this node became the coordinator leader (leader flapping: many across the cluster in a short time)."})
	m.LeaseTTL = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_lease_ttl_seconds",
		Help: "TTL of the node and coordinator leases this node runs with (tickd --lease)."})
	m.ShardsUnowned = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_shards_unowned",
		Help: "Shards without a live owner in the coordinator's last round: never granted, granted to a session whose lease is gone, " +
			"or released in a hand-off and not granted yet (0 on nodes that do not lead)."})
	m.ShardUnownedMaxAge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_shard_unowned_max_seconds",
		Help: "How long the longest-unowned shard has been without a live owner, as this leader saw it (from its owner's lease " +
			"expiry or its release; 0 when every shard has one, and on nodes that do not lead)."})
	m.TickPeriod = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_tick_period_seconds",
		Help: "Time between two ticks of an instance (1 / tick rate): the budget tick lateness is measured against."})
	m.LeaseRenewal = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tickfence_lease_renewal_seconds",
		Help: "Round trip of acknowledged lease renewals (node and coordinator leases).", Buckets: LatencyBuckets})
	m.SelfFenced = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_self_fenced_total",
		Help: "Times a lease of this node went unrenewed for too long and the node stopped acting on it (the coordinator at TTL minus margin; a node's shards after its ride-through)."})
	m.RideThroughs = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_lease_ride_through_total",
		Help: "Times this node's lease went unrenewed past TTL minus margin and the node kept ticking, its writes checked by the fence (an unreachable control plane)."})
	m.RidingThrough = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_lease_riding_through",
		Help: "1 while this node ticks on the fence without a renewed lease."})
	for _, r := range []string{"ok", "timeout", "aborted"} {
		m.Handoffs.WithLabelValues(r)
	}
	m.FramesPublished = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_frames_published_total",
		Help: "Frames of this node's instances handed to NATS."})
	m.FramesDropped = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_frames_dropped_total",
		Help: "Frames dropped because the publisher's queue was full or NATS refused them (frames are not durable)."})
	m.FramesRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_frames_refused_total",
		Help: "Frames a game made that break the limits (topic, size): logged and not published."})
	m.FrameNotices = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_frame_notices_total",
		Help: "Stored notices handed to NATS: an acknowledged write made a frame published before durable and no frame of the next tick said so."})
	m.EffectsEmitted = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_effects_emitted_total",
		Help: "Effects games emitted, put in their instances' outboxes (stored with the next write)."})
	m.EffectsPublished = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_effects_published_total",
		Help: "Stored effects acknowledged by the effects stream (a new owner's republish of one counts again)."})
	m.EffectsFailed = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_effects_publish_failures_total",
		Help: "Effect publishes that failed (sent again later)."})
	m.EffectsRefused = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_effects_refused_total",
		Help: "Effects a game made that break the limits (kind, size): logged and not stored."})
	m.EffectsPending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tickfence_effects_pending",
		Help: "Effects held in this node's stored records that the effects stream has not acknowledged yet: the backlog."}, func() float64 {
		if f := m.fxHeld.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	reg.MustRegister(m.EffectsPending)
	m.BlobUploads = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tickfence_blob_uploads_total",
		Help: "Large states (over 64 KiB) this node uploaded to the blobs bucket: one per write whose state changed."}, m.blobStat(func(s store.BlobStats) uint64 { return s.Uploads }))
	m.BlobUploadBytes = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tickfence_blob_upload_bytes_total",
		Help: "Bytes of the large states this node uploaded."}, m.blobStat(func(s store.BlobStats) uint64 { return s.UploadBytes }))
	m.BlobKept = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tickfence_blob_kept_total",
		Help: "Writes of a large state that uploaded nothing: the state was the stored record's, whose blob pointer the record kept."}, m.blobStat(func(s store.BlobStats) uint64 { return s.Kept }))
	m.BlobGCRuns = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickfence_blob_gc_runs_total",
		Help: "Blob collections this node ran as coordinator leader, by result: ok, error."}, []string{"result"})
	m.BlobGCDeleted = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_blob_gc_deleted_total",
		Help: "Blobs the collections deleted: referenced by no record of the live epoch, older than the grace period."})
	m.BlobGCDeletedBytes = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_blob_gc_deleted_bytes_total",
		Help: "Bytes of the blobs the collections deleted."})
	m.BlobGCOrphanChunks = prometheus.NewCounter(prometheus.CounterOpts{Name: "tickfence_blob_gc_orphan_chunks_total",
		Help: "Uploads whose chunks no blob names (a writer that stopped half-way) the collections deleted."})
	m.BlobGCObjects = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_blob_gc_objects",
		Help: "Blobs in the bucket after the last collection."})
	m.BlobGCReferenced = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_blob_gc_referenced",
		Help: "Blobs a record of the live epoch pointed at in the last collection."})
	m.BlobGCYoung = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_blob_gc_young",
		Help: "Unreferenced blobs the last collection kept because they were younger than the grace period."})
	m.BlobGCLastSuccess = prometheus.NewGauge(prometheus.GaugeOpts{Name: "tickfence_blob_gc_last_success_timestamp_seconds",
		Help: "When this node last finished a blob collection (Unix time; 0: never)."})
	m.BlobGCSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tickfence_blob_gc_seconds",
		Help: "Duration of a blob collection (listing, reference scan of every record, deletes).", Buckets: prometheus.ExponentialBuckets(0.01, 4, 9)})
	for _, r := range []string{"ok", "error"} {
		m.BlobGCRuns.WithLabelValues(r)
	}
	reg.MustRegister(m.BlobUploads, m.BlobUploadBytes, m.BlobKept, m.BlobGCRuns, m.BlobGCDeleted, m.BlobGCDeletedBytes,
		m.BlobGCOrphanChunks, m.BlobGCObjects, m.BlobGCReferenced, m.BlobGCYoung, m.BlobGCLastSuccess, m.BlobGCSeconds)
	m.InstancesFailed = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tickfence_instances_failed",
		Help: "Instances out of service on this node because the game's code failed in them (a panic, a state that does not restore, an unknown kind): answered instance_failed until an operator reloads them (tickctl instance reload)."}, func() float64 {
		if f := m.failedNow.Load(); f != nil {
			return float64((*f)())
		}
		return 0
	})
	m.InstanceFailures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tickfence_instance_failures_total",
		Help: "Instances taken out of service because the game's code failed in them, by cause: panic, restore, unknown_kind, bad_record, invalid_effect."}, []string{"cause"})
	for _, c := range []string{"panic", "restore", "unknown_kind", "bad_record", "invalid_effect"} {
		m.InstanceFailures.WithLabelValues(c)
	}
	reg.MustRegister(m.InstancesFailed, m.InstanceFailures)
	m.Life = newLife(reg)
	reg.MustRegister(m.Failovers, m.Handoffs, m.HandoffPause, m.CoordinatorLeader, m.Elections, m.LeaseRenewal, m.SelfFenced, m.RideThroughs, m.RidingThrough,
		m.LeaseTTL, m.ShardsUnowned, m.ShardUnownedMaxAge, m.TickPeriod,
		m.FramesPublished, m.FramesDropped, m.FramesRefused, m.FrameNotices, m.EffectsEmitted, m.EffectsPublished, m.EffectsFailed, m.EffectsRefused)
	for _, r := range []string{"ok", "stale_owner", "conflict", "refused", "error"} {
		m.StateWrites.WithLabelValues(r)
	}
	for _, r := range []string{"reassigned", "stale_owner", "handoff", "shutdown"} { // a series from 0, so increase() sees the first stop
		m.ShardStops.WithLabelValues(r)
	}
	reg.MustRegister(m.tickMetrics, m.TicksSkipped, m.StateWrites, m.Instances,
		m.ShardsOwned, m.Commands, m.CommandSeconds, m.CommandQueueSeconds, m.RepliesRefused, m.ShardStops, m.Rotations, m.CommandsPending, m.Shedding, m.WriteSeconds, m.WriteBatch)
	return m
}

// StateWrite counts a write outcome.
func (m *Node) StateWrite(result string) {
	m.StateWrites.WithLabelValues(result).Inc()
	if result == "ok" {
		m.writes.Add(1)
	}
}

// WritesOK is the number of successful writes so far (for the summary log).
func (m *Node) WritesOK() uint64 { return m.writes.Load() }
