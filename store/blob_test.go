package store_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/tickfence/tickfence/store"
)

// mapBlobs is store.Blobs in a map, counting puts.
type mapBlobs struct {
	m    map[string][]byte
	puts int
	fail error
}

func (b *mapBlobs) PutBlob(name string, data []byte) (string, error) {
	if b.fail != nil {
		return "", b.fail
	}
	if b.m == nil {
		b.m = map[string][]byte{}
	}
	b.puts++
	b.m[name] = append([]byte(nil), data...)
	return store.BlobDigest(data), nil
}

func (b *mapBlobs) GetBlob(name string) ([]byte, error) { return b.m[name], nil }

func bigState(b byte) []byte { return bytes.Repeat([]byte{b}, store.BlobThreshold+1) }

// prepare readies a record of id at tick with state under g and fails the test on an error.
func prepare(t *testing.T, w *store.BlobWriter, bl *mapBlobs, g store.Grant, tick uint64, state []byte) (store.Record, func(uint64, error)) {
	t.Helper()
	r := store.Record{Tick: tick, State: state}
	settle, err := w.Prepare(&r, g, "i", bl)
	if err != nil {
		t.Fatalf("Prepare at tick %d: %v", tick, err)
	}
	return r, settle
}

// TestBlobWriterKeepsOnlyWhatIsStored: the pointer is kept only from a write known stored, with no
// other write of the instance in flight, and never from a lower token.
func TestBlobWriterKeepsOnlyWhatIsStored(t *testing.T) {
	g := store.Grant{Epoch: 1, Shard: 0, Token: 10}
	tests := []struct {
		name string
		run  func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) // leaves one write of bigState(1) stored or not
		keep bool                                                  // whether the next write of bigState(1) keeps the pointer
	}{
		{"stored", func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) {
			_, s := prepare(t, w, bl, g, 1, bigState(1))
			s(5, nil)
		}, true},
		{"not settled yet", func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) {
			prepare(t, w, bl, g, 1, bigState(1))
		}, false},
		{"outcome unknown", func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) {
			_, s := prepare(t, w, bl, g, 1, bigState(1))
			s(0, store.ErrUnknownOutcome)
		}, false},
		{"a later write in flight", func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) {
			_, s := prepare(t, w, bl, g, 1, bigState(1))
			s(5, nil)
			prepare(t, w, bl, g, 2, bigState(2)) // not settled: the record may point at its blob any moment
		}, false},
		{"acknowledgements out of order", func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) {
			_, s1 := prepare(t, w, bl, g, 1, bigState(1))
			_, s2 := prepare(t, w, bl, g, 2, bigState(2))
			s2(6, nil)
			s1(5, nil) // older: the record is at 6, bigState(2)'s
		}, false},
		{"a registration", func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) {
			r, s := prepare(t, w, bl, g, 1, bigState(1))
			s(5, nil)
			w.Registered(store.Grant{Epoch: 1, Token: 12}, "i", 13, r.Blob)
		}, true},
		{"stored under a lower token", func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) {
			_, s := prepare(t, w, bl, store.Grant{Epoch: 1, Token: 12}, 1, bigState(2))
			s(13, nil)
			_, s = prepare(t, w, bl, g, 1, bigState(1)) // a zombie's write, acknowledged: learns nothing
			s(14, nil)
		}, false},
		{"forgotten (an end)", func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) {
			_, s := prepare(t, w, bl, g, 1, bigState(1))
			s(5, nil)
			w.Forget(g, "i")
		}, false},
		{"forgotten while in flight", func(t *testing.T, w *store.BlobWriter, bl *mapBlobs) {
			_, s := prepare(t, w, bl, g, 1, bigState(1))
			w.Forget(g, "i")
			s(5, nil)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w store.BlobWriter
			bl := &mapBlobs{}
			tc.run(t, &w, bl)
			before := bl.puts
			next := g
			if tc.name == "a registration" {
				next.Token = 12
			}
			r, _ := prepare(t, &w, bl, next, 9, bigState(1))
			if kept := bl.puts == before; kept != tc.keep {
				t.Fatalf("next unchanged write kept the pointer: %v, want %v (blob %+v)", kept, tc.keep, r.Blob)
			}
			if r.State != nil || r.Blob == nil || r.Blob.Digest != store.BlobDigest(bigState(1)) {
				t.Fatalf("prepared record: %d bytes inline, blob %+v", len(r.State), r.Blob)
			}
			if st := w.Stats(); st.Uploads != uint64(bl.puts) || (st.Kept == 1) != tc.keep {
				t.Fatalf("stats %+v after %d puts", st, bl.puts)
			}
		})
	}
}

// TestBlobWriterRefusedUpload: a failed upload refuses the write (the writer keeps its token) and
// keeps nothing.
func TestBlobWriterRefusedUpload(t *testing.T) {
	var w store.BlobWriter
	bl := &mapBlobs{fail: errors.New("no space")}
	r := store.Record{Tick: 1, State: bigState(1)}
	if _, err := w.Prepare(&r, store.Grant{Epoch: 1, Token: 3}, "i", bl); !errors.Is(err, store.ErrRefused) {
		t.Fatalf("Prepare with a failing upload: %v, want ErrRefused", err)
	}
	r = store.Record{Tick: 1, State: bytes.Repeat([]byte{1}, store.MaxBlobBytes+1)}
	if _, err := w.Prepare(&r, store.Grant{Epoch: 1, Token: 3}, "i", bl); !errors.Is(err, store.ErrTooLarge) {
		t.Fatalf("Prepare of a state over MaxBlobBytes: %v, want ErrTooLarge", err)
	}
}
