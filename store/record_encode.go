package store

import (
	"slices"

	"github.com/tickfence/tickfence/internal/mpenc"
)

// appendRecord appends the msgpack encoding of r to b: byte for byte what msgpack.Encoder
// (with compact integers) makes of the struct tags of Record, written out by hand. Every record
// write encodes one, and the reflective encoder was the largest cost of our own on the write path
// (6 % of a node's CPU at 5 000 demo dungeons, and growing its buffer by doubling). The property
// test TestAppendRecordMatchesTheReflectiveEncoder holds the two equal: a field added to Record
// (or to a type it holds) must be added here too, and the test fails until it is.
func appendRecord(b []byte, r *Record) []byte {
	n := 6 // v, token, tick, kind, state, reqs
	if len(r.Create) > 0 {
		n++
	}
	if len(r.Clients) > 0 {
		n++
	}
	if len(r.Gone) > 0 {
		n++
	}
	if r.Creator != "" {
		n++
	}
	if r.Ended {
		n++
	}
	if r.EndedAt != 0 {
		n++
	}
	if len(r.Fx) > 0 {
		n++
	}
	if r.FxSeq != 0 {
		n++
	}
	if r.FxEpoch != 0 {
		n++
	}
	if r.Blob != nil {
		n++
	}
	if len(r.Players) > 0 {
		n++
	}
	if len(r.Labels) > 0 {
		n++
	}
	if r.Passive {
		n++
	}
	b = mpenc.MapLen(b, n)
	b = mpenc.Int(mpenc.Str(b, "v"), int64(r.V))
	b = mpenc.Uint(mpenc.Str(b, "token"), r.Token)
	b = mpenc.Uint(mpenc.Str(b, "tick"), r.Tick)
	b = mpenc.Str(mpenc.Str(b, "kind"), r.Kind)
	b = mpenc.Bin(mpenc.Str(b, "state"), r.State)
	b = mpenc.Str(b, "reqs")
	if r.Reqs == nil {
		b = append(b, 0xc0)
	} else {
		b = mpenc.ArrayLen(b, len(r.Reqs))
		for i := range r.Reqs {
			q := &r.Reqs[i]
			b = mpenc.MapLen(b, 4)
			b = mpenc.Str(mpenc.Str(b, "id"), q.ID)
			b = mpenc.Uint(mpenc.Str(b, "fp"), q.Fingerprint)
			b = mpenc.Bin(mpenc.Str(b, "res"), q.Result)
			b = mpenc.Uint(mpenc.Str(b, "at"), q.At)
		}
	}
	if len(r.Create) > 0 {
		b = mpenc.Bin(mpenc.Str(b, "create"), r.Create)
	}
	if len(r.Clients) > 0 {
		b = mpenc.ArrayLen(mpenc.Str(b, "clients"), len(r.Clients))
		for i := range r.Clients {
			c := &r.Clients[i]
			if len(c.Done) > 0 {
				b = mpenc.MapLen(b, 4)
			} else {
				b = mpenc.MapLen(b, 3)
			}
			b = mpenc.Str(mpenc.Str(b, "id"), c.ID)
			b = mpenc.Uint(mpenc.Str(b, "ack"), c.Ack)
			b = mpenc.Uint(mpenc.Str(b, "seen"), c.Seen)
			if len(c.Done) > 0 {
				b = mpenc.ArrayLen(mpenc.Str(b, "done"), len(c.Done))
				for j := range c.Done {
					d := &c.Done[j]
					b = mpenc.MapLen(b, 3)
					b = mpenc.Uint(mpenc.Str(b, "seq"), d.Seq)
					b = mpenc.Uint(mpenc.Str(b, "fp"), d.Fingerprint)
					b = mpenc.Bin(mpenc.Str(b, "res"), d.Result)
				}
			}
		}
	}
	if len(r.Gone) > 0 {
		b = mpenc.ArrayLen(mpenc.Str(b, "gone"), len(r.Gone))
		for i := range r.Gone {
			g := &r.Gone[i]
			n := 3
			if len(g.Done) > 0 {
				n++
			}
			if g.Sender != 0 {
				n++
			}
			b = mpenc.MapLen(b, n)
			b = mpenc.Uint(mpenc.Str(b, "h"), g.Client)
			b = mpenc.Uint(mpenc.Str(b, "ack"), g.Ack)
			if len(g.Done) > 0 {
				b = mpenc.ArrayLen(mpenc.Str(b, "done"), len(g.Done))
				for _, d := range g.Done {
					b = mpenc.Uint(b, d)
				}
			}
			b = mpenc.Uint(mpenc.Str(b, "seen"), g.Seen)
			if g.Sender != 0 {
				b = mpenc.Uint(mpenc.Str(b, "s"), g.Sender)
			}
		}
	}
	if r.Creator != "" {
		b = mpenc.Str(mpenc.Str(b, "creator"), r.Creator)
	}
	if r.Ended {
		b = append(mpenc.Str(b, "ended"), 0xc3)
	}
	if r.EndedAt != 0 {
		b = mpenc.Int(mpenc.Str(b, "ended_at"), r.EndedAt)
	}
	if len(r.Fx) > 0 {
		b = mpenc.ArrayLen(mpenc.Str(b, "fx"), len(r.Fx))
		for i := range r.Fx {
			e := &r.Fx[i]
			b = mpenc.MapLen(b, 3)
			b = mpenc.Str(mpenc.Str(b, "key"), e.Key)
			b = mpenc.Str(mpenc.Str(b, "kind"), e.Kind)
			b = mpenc.Bin(mpenc.Str(b, "payload"), e.Payload)
		}
	}
	if r.FxSeq != 0 {
		b = mpenc.Uint(mpenc.Str(b, "fx_seq"), r.FxSeq)
	}
	if r.FxEpoch != 0 {
		b = mpenc.Uint(mpenc.Str(b, "fx_epoch"), r.FxEpoch)
	}
	if r.Blob != nil {
		b = mpenc.MapLen(mpenc.Str(b, "blob"), 3)
		b = mpenc.Str(mpenc.Str(b, "name"), r.Blob.Name)
		b = mpenc.Str(mpenc.Str(b, "digest"), r.Blob.Digest)
		b = mpenc.Int(mpenc.Str(b, "size"), int64(r.Blob.Size))
	}
	if len(r.Players) > 0 {
		b = mpenc.ArrayLen(mpenc.Str(b, "players"), len(r.Players))
		for i := range r.Players {
			p := &r.Players[i]
			b = mpenc.MapLen(b, 3)
			b = mpenc.Str(mpenc.Str(b, "p"), p.Player)
			b = mpenc.Uint(mpenc.Str(b, "since"), p.Since)
			b = mpenc.Uint(mpenc.Str(b, "seen"), p.Seen)
		}
	}
	if len(r.Labels) > 0 {
		// In key order: a record's bytes depend on nothing but its values (msgpack.Encoder with
		// SetSortMapKeys writes the same).
		b = mpenc.MapLen(mpenc.Str(b, "labels"), len(r.Labels))
		keys := make([]string, 0, len(r.Labels))
		for k := range r.Labels {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			b = mpenc.Str(mpenc.Str(b, k), r.Labels[k])
		}
	}
	if r.Passive {
		b = append(mpenc.Str(b, "passive"), 0xc3)
	}
	return b
}
