package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/tickfence/tickfence/internal/mpscan"
)

// SchemaVersion is the highest version of the instance record encoding this code writes and
// reads. Version 2 added client sessions (clients) and the age of remembered requests (at);
// version 3 the effects outbox (fx, fx_seq, fx_epoch); version 4 the sessions let go of (gone);
// version 5 the players present (players); version 6 the labels (labels) and passivation
// (passive). A record is written at the lowest version that holds what it has
// (Record.WriteVersion: one without players, labels or passivation is still version 4). Older
// versions are read as they are. An older build refuses a newer version rather than forget its
// sessions, its effects, who is in or its labels.
const SchemaVersion = LabelsVersion

// Size limits. A record or command over its limit is refused before anything is stored.
const (
	MaxRecordBytes  = 256 << 10
	MaxCommandBytes = 16 << 10
	// RequestWindow bounds how many opaque request IDs a record remembers: the last 128, of
	// those applied within RequestTTL, within RequestWindowBytes. The compact form (client
	// sessions, session.go) has no such horizon.
	RequestWindow = 128
	// RequestTTL: an opaque request ID is forgotten this long after it was applied.
	RequestTTL = ClientSessionTTL
	// RequestWindowBytes bounds the encoded size of the remembered opaque requests.
	RequestWindowBytes = 32 << 10
)

// Record is the value of inst.<S>.<id>, encoded as a msgpack map (DESIGN.md section 3).
type Record struct {
	V     int    `msgpack:"v"`
	Token uint64 `msgpack:"token"`
	Tick  uint64 `msgpack:"tick"`
	Kind  string `msgpack:"kind"`
	// State is the game's own msgpack encoding of the instance; empty right after Create.
	State []byte `msgpack:"state"`
	// Reqs are the most recent applied requests, oldest first.
	Reqs []Request `msgpack:"reqs"`
	// Create is the msgpack body of the create command, kept while State is empty (a Create
	// placeholder whose initial write is uncertain): a rebuild makes the instance from it.
	Create []byte `msgpack:"create,omitempty"`
	// Clients are the client sessions of the compact request form (session.go), in no order.
	Clients []ClientSession `msgpack:"clients,omitempty"`
	// Gone are the sessions let go of while they held answers (session.go), in no order.
	Gone []GoneSession `msgpack:"gone,omitempty"`
	// Creator is who created the instance when an untrusted sender did (a digest of its account
	// and user): that sender may end it. Empty when a trusted sender created it (only trusted
	// senders may end it).
	Creator string `msgpack:"creator,omitempty"`
	// Ended marks a tombstone: the instance was ended; the record keeps its request window so a
	// retransmitted end gets its first answer and never ends a later instance of the same ID.
	Ended bool `msgpack:"ended,omitempty"`
	// EndedAt is the owner's wall clock (Unix ms) when it ended: only to expire the tombstone.
	EndedAt int64 `msgpack:"ended_at,omitempty"`
	// Fx is the effects outbox (DESIGN 8): effects stored by the write that made them and not
	// yet acknowledged by the effects stream, oldest first. An owner publishes them only after
	// the write holding them was accepted, and drops them once the stream acknowledged them.
	Fx []Effect `msgpack:"fx,omitempty"`
	// FxSeq is the sequence number of the last effect this instance made (its keys never repeat).
	FxSeq uint64 `msgpack:"fx_seq,omitempty"`
	// FxEpoch is the epoch of FxSeq's base: the epoch whose bucket revision FxSeqBase took it
	// from (the life's creation, or its first load in a later epoch: a restore). An instance's
	// effect keys carry it, so that no two effects of an ID share a key across lives, epochs and
	// restores (EffectKey). 0 in a record written before it existed: the next owner rebases.
	FxEpoch uint64 `msgpack:"fx_epoch,omitempty"`
	// Blob, if set, says the state is in the Object Store (DESIGN 8): State is empty in the
	// stored record. Backends set and follow it themselves: a caller's State is always the
	// state (Load fills it from the blob; Write moves a state over BlobThreshold to a new blob).
	Blob *BlobRef `msgpack:"blob,omitempty"`
	// Players are the players present in the instance (presence.go), in ascending order of their
	// names: kept for a Logic that tracks players (actor.PlayerJoiner, actor.PlayerLeaver), so
	// that who is in, and who joined or left, survives a failover exactly as stored.
	Players []Presence `msgpack:"players,omitempty"`
	// Labels are the instance's labels (set by its create command and by its Logic: listings
	// filter on them), at most MaxLabels. A write never changes the map a record holds: a change
	// makes a new one.
	Labels map[string]string `msgpack:"labels,omitempty"`
	// Passive marks the last write of a passivated instance (its kind's KindOptions.Passivate): an
	// owner that loads it may leave it unloaded until a command or a watcher's interest wakes it.
	Passive bool `msgpack:"passive,omitempty"`
}

// MaxLabels bounds the labels a record holds (actor.MaxLabels; a record with more than four
// times as many does not decode).
const MaxLabels = 16

// MatchLabels reports whether labels hold every label of sel with its value (a value "*" only
// asks for the key). An empty sel matches every instance.
func MatchLabels(labels, sel map[string]string) bool {
	for k, v := range sel {
		got, ok := labels[k]
		if !ok || v != "*" && got != v {
			return false
		}
	}
	return true
}

// BlobRef points at an instance's state in the Object Store bucket BlobBucket.
type BlobRef struct {
	Name   string `msgpack:"name"`   // <id>/<epoch>-<token>-<tick>: never reused
	Digest string `msgpack:"digest"` // "SHA-256=<base64url>", as the Object Store reports it
	Size   int    `msgpack:"size"`
}

// Large state (DESIGN 8).
const (
	// BlobBucket is the Object Store bucket of states too large for a record.
	BlobBucket = "tickfence-blobs"
	// BlobThreshold: a state over this many bytes is uploaded to BlobBucket before the fenced
	// write of the record that points at it.
	BlobThreshold = 64 << 10
	// MaxBlobBytes bounds a state kept as a blob.
	MaxBlobBytes = 16 << 20
)

// BlobName is the object name of an instance's state written under a grant at a tick.
func BlobName(id string, epoch, token, tick uint64) string {
	return id + "/" + strconv.FormatUint(epoch, 10) + "-" + strconv.FormatUint(token, 10) + "-" + strconv.FormatUint(tick, 10)
}

// BlobOwner is the instance ID of a blob name ("" if it is not one).
func BlobOwner(name string) string {
	i := strings.IndexByte(name, '/')
	if i <= 0 {
		return ""
	}
	return name[:i]
}

// BlobDigest is the digest of a state in the Object Store's form.
func BlobDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])
}

// Effect is one effect in the outbox: its key (<id>:<epoch of creation>:<seq>, the stream's
// Nats-Msg-Id and the consumer's idempotency key), kind and payload.
type Effect struct {
	Key     string `msgpack:"key"`
	Kind    string `msgpack:"kind"`
	Payload []byte `msgpack:"payload"`
}

// MaxOutbox bounds the effects an instance's record holds unpublished. While its outbox is full
// the instance refuses new commands with busy (ticks go on); see the README.
const MaxOutbox = 256

// MaxOutboxBytes bounds the payload bytes an outbox holds unpublished (the same rule applies).
const MaxOutboxBytes = 64 << 10

// FxSeqBase is where the effect sequence of an instance starts when its life starts at
// revision rev of its key, or when it is first loaded at revision rev in an epoch later than its
// FxEpoch (a restore: its bucket's revisions start again at 1). Effect keys are
// <id>:<FxEpoch>:<seq>, and within one epoch's bucket a base is taken from a revision of that
// key and the keys above it are bounded by what that key's later writes held: every effect
// needs a write (at most MaxOutbox each, far below 2^24), and every write is a revision of the
// key, so the next base of the same key in the same epoch, taken at a later revision r2, lies
// above everything the earlier base produced ((r2-rev) << 24 > MaxOutbox * (r2-rev)). A life that
// emits more than 2^24 effects is no exception: it has written more than 2^24/MaxOutbox times.
func FxSeqBase(rev uint64) uint64 { return rev << 24 }

// EffectKey is the key of an instance's seq-th effect, made under epoch.
func EffectKey(id string, epoch, seq uint64) string {
	return id + ":" + strconv.FormatUint(epoch, 10) + ":" + strconv.FormatUint(seq, 10)
}

// ParseEffectKey splits an effect key into its instance, epoch and sequence number.
func ParseEffectKey(key string) (id string, epoch, seq uint64, ok bool) {
	j := strings.LastIndexByte(key, ':')
	if j < 0 {
		return "", 0, 0, false
	}
	i := strings.LastIndexByte(key[:j], ':')
	if i <= 0 {
		return "", 0, 0, false
	}
	e, err1 := strconv.ParseUint(key[i+1:j], 10, 64)
	s, err2 := strconv.ParseUint(key[j+1:], 10, 64)
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return key[:i], e, s, true
}

// Request remembers one applied command: a retransmission with the same ID and fingerprint gets
// Result again; the same ID with another fingerprint is refused.
type Request struct {
	ID          string `msgpack:"id"`
	Fingerprint uint64 `msgpack:"fp"`
	// Result is the encoded reply (msgpack) that was sent the first time.
	Result []byte `msgpack:"res"`
	// At is the instance's tick when it was applied: only to forget it.
	At uint64 `msgpack:"at"`
}

func (q Request) size() int { return len(q.ID) + len(q.Result) + 24 }

// FindRequest returns the remembered request with that ID, if any.
func (r *Record) FindRequest(id string) (Request, bool) {
	for i := len(r.Reqs) - 1; i >= 0; i-- {
		if r.Reqs[i].ID == id {
			return r.Reqs[i], true
		}
	}
	return Request{}, false
}

// RememberRequest appends a request applied at tick q.At, keeping the last RequestWindow, those
// within ttl ticks (RequestTTL in ticks) of it and within RequestWindowBytes. It writes only past the window's length: a
// record in flight that shares the array holds it capped at its own length.
func (r *Record) RememberRequest(q Request, ttl uint64) {
	reqs := append(r.Reqs, q) // past the length of any record sharing the array: theirs is capped
	if p := SenderOf(q.ID); p != "" {
		// An untrusted sender past its share forgets its own oldest, never another's (a new
		// array: a record in flight may share this one).
		n, first := 0, -1
		for i := range reqs {
			if strings.HasPrefix(reqs[i].ID, p) {
				if n++; first < 0 {
					first = i
				}
			}
		}
		if n > MaxSenderRequests {
			reqs = slices.Delete(slices.Clone(reqs), first, first+1)
		}
	}
	drop, bytes := len(reqs)-RequestWindow, 0
	for i := len(reqs) - 1; i >= 0; i-- {
		bytes += reqs[i].size()
		if bytes > RequestWindowBytes && i < len(reqs)-1 || reqs[i].At != 0 && q.At > reqs[i].At && q.At-reqs[i].At > ttl {
			drop = max(drop, i+1)
			break
		}
	}
	r.Reqs = reqs[max(drop, 0):]
}

// ApproxSize is at least about the encoded size of r (msgpack's field names and headers counted
// generously per entry), without encoding it; a state over BlobThreshold leaves the record for a
// blob, whose pointer is counted.
func (r Record) ApproxSize() int {
	n := 128 + len(r.Kind) + len(r.Create)
	if len(r.State) <= BlobThreshold {
		n += len(r.State)
	} else {
		n += 256 // the blob's name and digest
	}
	for _, q := range r.Reqs {
		n += 48 + len(q.ID) + len(q.Result)
	}
	for _, c := range r.Clients {
		n += 48 + len(c.ID)
		for _, d := range c.Done {
			n += 40 + len(d.Result)
		}
	}
	for _, e := range r.Fx {
		n += 32 + len(e.Key) + len(e.Kind) + len(e.Payload)
	}
	for _, g := range r.Gone {
		n += 48 + 9*len(g.Done)
	}
	for _, p := range r.Players {
		n += 40 + len(p.Player)
	}
	for k, v := range r.Labels {
		n += 10 + len(k) + len(v)
	}
	return n
}

// EncodeRecord encodes a record at its schema version (WriteVersion); ErrTooLarge over MaxRecordBytes.
func EncodeRecord(r Record) ([]byte, error) {
	return AppendRecord(make([]byte, 0, r.ApproxSize()), r)
}

// AppendRecord appends the encoding of r (as EncodeRecord makes it) to b and returns the extended
// buffer: a writer that knows when the store is done with a record's bytes can reuse its buffers.
func AppendRecord(b []byte, r Record) ([]byte, error) {
	r.V = r.WriteVersion()
	n := len(b)
	b = appendRecord(b, &r)
	if len(b)-n > MaxRecordBytes {
		return nil, fmt.Errorf("%w: record is %d bytes, limit %d", ErrTooLarge, len(b)-n, MaxRecordBytes)
	}
	return b, nil
}

// DecodeRecord decodes and validates a record. Any malformed input gives an error wrapping
// ErrBadRecord (or ErrTooLarge), never a panic.
func DecodeRecord(b []byte) (Record, error) {
	var r Record
	if len(b) > MaxRecordBytes {
		return r, fmt.Errorf("%w: record is %d bytes, limit %d", ErrTooLarge, len(b), MaxRecordBytes)
	}
	if err := mpscan.Check(b); err != nil {
		return r, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	rd := bytes.NewReader(b) // a ByteScanner: the decoder reads it directly, so Len is exact
	if err := msgpack.NewDecoder(rd).Decode(&r); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrBadRecord, err)
	}
	if rd.Len() != 0 {
		return Record{}, fmt.Errorf("%w: trailing bytes", ErrBadRecord)
	}
	if r.V < 1 || r.V > SchemaVersion {
		return Record{}, fmt.Errorf("%w: schema version %d, this build reads 1 to %d", ErrBadRecord, r.V, SchemaVersion)
	}
	if r.Kind == "" {
		return Record{}, fmt.Errorf("%w: no kind", ErrBadRecord)
	}
	if len(r.Reqs) > 4*RequestWindow {
		return Record{}, fmt.Errorf("%w: %d remembered requests", ErrBadRecord, len(r.Reqs))
	}
	if len(r.Clients) > 4*MaxClientSessions {
		return Record{}, fmt.Errorf("%w: %d client sessions", ErrBadRecord, len(r.Clients))
	}
	if len(r.Gone) > 4*MaxGoneSessions {
		return Record{}, fmt.Errorf("%w: %d sessions let go of", ErrBadRecord, len(r.Gone))
	}
	gone := make(map[uint64]bool, len(r.Gone))
	for _, g := range r.Gone {
		if gone[g.Client] {
			return Record{}, fmt.Errorf("%w: two sessions let go of with one client hash %x", ErrBadRecord, g.Client)
		}
		gone[g.Client] = true
		prev := g.Ack
		for _, d := range g.Done {
			if d <= prev || len(g.Done) > 4*MaxGoneAnswers {
				return Record{}, fmt.Errorf("%w: a session let go of with %d numbers, not strictly ascending above its ack %d", ErrBadRecord, len(g.Done), g.Ack)
			}
			prev = d
		}
	}
	if err := checkPlayers(r.Players); err != nil {
		return Record{}, err
	}
	if len(r.Labels) > 4*MaxLabels {
		return Record{}, fmt.Errorf("%w: %d labels", ErrBadRecord, len(r.Labels))
	}
	if len(r.Fx) > 4*MaxOutbox {
		return Record{}, fmt.Errorf("%w: %d effects in the outbox", ErrBadRecord, len(r.Fx))
	}
	for _, e := range r.Fx {
		if e.Key == "" || e.Kind == "" {
			return Record{}, fmt.Errorf("%w: an effect without a key or kind", ErrBadRecord)
		}
	}
	ids := make(map[string]bool, len(r.Clients))
	for _, c := range r.Clients {
		if c.ID == "" || ids[c.ID] || len(c.Done) > 4*MaxClientInFlight {
			return Record{}, fmt.Errorf("%w: client session %q (duplicate or empty ID, or %d answers)", ErrBadRecord, c.ID, len(c.Done))
		}
		ids[c.ID] = true
		prev := c.Ack
		for _, d := range c.Done {
			if d.Seq <= prev {
				return Record{}, fmt.Errorf("%w: client session %q: answer %d not above the ack %d and the answer before it", ErrBadRecord, c.ID, d.Seq, c.Ack)
			}
			prev = d.Seq
		}
	}
	return r, nil
}
