package store

import (
	"encoding/binary"
	"math"
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
	if r.Blob != nil {
		n++
	}
	b = mpMapLen(b, n)
	b = mpInt(mpStr(b, "v"), int64(r.V))
	b = mpUint(mpStr(b, "token"), r.Token)
	b = mpUint(mpStr(b, "tick"), r.Tick)
	b = mpStr(mpStr(b, "kind"), r.Kind)
	b = mpBin(mpStr(b, "state"), r.State)
	b = mpStr(b, "reqs")
	if r.Reqs == nil {
		b = append(b, 0xc0)
	} else {
		b = mpArrayLen(b, len(r.Reqs))
		for i := range r.Reqs {
			q := &r.Reqs[i]
			b = mpMapLen(b, 4)
			b = mpStr(mpStr(b, "id"), q.ID)
			b = mpUint(mpStr(b, "fp"), q.Fingerprint)
			b = mpBin(mpStr(b, "res"), q.Result)
			b = mpUint(mpStr(b, "at"), q.At)
		}
	}
	if len(r.Create) > 0 {
		b = mpBin(mpStr(b, "create"), r.Create)
	}
	if len(r.Clients) > 0 {
		b = mpArrayLen(mpStr(b, "clients"), len(r.Clients))
		for i := range r.Clients {
			c := &r.Clients[i]
			if len(c.Done) > 0 {
				b = mpMapLen(b, 4)
			} else {
				b = mpMapLen(b, 3)
			}
			b = mpStr(mpStr(b, "id"), c.ID)
			b = mpUint(mpStr(b, "ack"), c.Ack)
			b = mpUint(mpStr(b, "seen"), c.Seen)
			if len(c.Done) > 0 {
				b = mpArrayLen(mpStr(b, "done"), len(c.Done))
				for j := range c.Done {
					d := &c.Done[j]
					b = mpMapLen(b, 3)
					b = mpUint(mpStr(b, "seq"), d.Seq)
					b = mpUint(mpStr(b, "fp"), d.Fingerprint)
					b = mpBin(mpStr(b, "res"), d.Result)
				}
			}
		}
	}
	if r.Ended {
		b = append(mpStr(b, "ended"), 0xc3)
	}
	if r.EndedAt != 0 {
		b = mpInt(mpStr(b, "ended_at"), r.EndedAt)
	}
	if len(r.Fx) > 0 {
		b = mpArrayLen(mpStr(b, "fx"), len(r.Fx))
		for i := range r.Fx {
			e := &r.Fx[i]
			b = mpMapLen(b, 3)
			b = mpStr(mpStr(b, "key"), e.Key)
			b = mpStr(mpStr(b, "kind"), e.Kind)
			b = mpBin(mpStr(b, "payload"), e.Payload)
		}
	}
	if r.FxSeq != 0 {
		b = mpUint(mpStr(b, "fx_seq"), r.FxSeq)
	}
	if r.Blob != nil {
		b = mpMapLen(mpStr(b, "blob"), 3)
		b = mpStr(mpStr(b, "name"), r.Blob.Name)
		b = mpStr(mpStr(b, "digest"), r.Blob.Digest)
		b = mpInt(mpStr(b, "size"), int64(r.Blob.Size))
	}
	return b
}

// The msgpack formats below are those msgpack.Encoder writes with compact integers.

func mpMapLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x80|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xde), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdf), uint32(n))
	}
}

func mpArrayLen(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

func mpStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

// mpBin: nil is msgpack's nil, as the reflective encoder writes a nil []byte.
func mpBin(b []byte, p []byte) []byte {
	switch n := len(p); {
	case p == nil:
		return append(b, 0xc0)
	case n < 256:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, p...)
}

func mpUint(b []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
	}
}

func mpInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return mpUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
	}
}
