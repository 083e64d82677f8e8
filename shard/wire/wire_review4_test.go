package wire_test

import (
	"testing"

	"github.com/tickfence/tickfence/shard/wire"
)

// Review 4: a reply whose top-level map repeats a key is well-formed msgpack; decoding it returns
// an error instead of panicking in the msgpack library (a repeated "result" did: reflect's Addr of
// an unaddressable value), so that no client crashes on what a node or an impostor sends.
func TestDecodeReplyRefusesRepeatedKeys(t *testing.T) {
	res := []byte{0xa6, 'r', 'e', 's', 'u', 'l', 't'}
	for name, b := range map[string][]byte{
		"result twice": append(append(append(append([]byte{0x83, 0xa2, 'o', 'k', 0xc3}, res...), 0x81, 0xa6, 'd', 'a', 'm', 'a', 'g', 'e', 0x01), res...),
			0x81, 0xa6, 'd', 'a', 'm', 'a', 'g', 'e', 90),
		"ok twice":    {0x82, 0xa2, 'o', 'k', 0xc3, 0xa2, 'o', 'k', 0xc2},
		"error twice": {0x83, 0xa2, 'o', 'k', 0xc2, 0xa5, 'e', 'r', 'r', 'o', 'r', 0x81, 0xa4, 'c', 'o', 'd', 'e', 0xa1, 'x', 0xa5, 'e', 'r', 'r', 'o', 'r', 0x81, 0xa4, 'c', 'o', 'd', 'e', 0xa1, 'y'},
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("DecodeReply(%x) panicked: %v", b, p)
				}
			}()
			if r, err := wire.DecodeReply(b, false); err == nil {
				t.Errorf("DecodeReply(%x) = %+v, want an error for the repeated key", b, r)
			}
			if st, err := wire.DecodeStatus(b, false); err == nil {
				t.Errorf("DecodeStatus(%x) = %+v, want an error for the repeated key, as DecodeReply", b, st)
			}
		})
	}
	// Keys that are not a reply's own are ignored by both, repeated or not (a fuzzer found the two
	// paths disagreeing on {"0000000000": …, "0000000000": …} when every repeat was refused).
	b := []byte{0x83, 0xa2, 'o', 'k', 0xc3, 0xa1, 'x', 0x01, 0xa1, 'x', 0x02}
	if r, err := wire.DecodeReply(b, false); err != nil || !r.OK {
		t.Errorf("DecodeReply(%x) = %+v, %v; want ok, the repeated x ignored", b, r, err)
	}
	if st, err := wire.DecodeStatus(b, false); err != nil || !st.OK {
		t.Errorf("DecodeStatus(%x) = %+v, %v; want ok", b, st, err)
	}
}
