package faultstore_test

import (
	"testing"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/faultstore"
	"github.com/tickfence/tickfence/store/memstore"
	"github.com/tickfence/tickfence/store/storetest"
)

// With no faults the wrapper is a store like any other: it passes the conformance suite.
func backend() storetest.Backend {
	return storetest.Backend{
		New: func(t *testing.T) store.Store {
			return faultstore.New(memstore.New(), 1, faultstore.Options{}).Client("suite")
		},
		PutRaw: func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte) {
			s.(*faultstore.Client).Net().Under().(*memstore.Store).PutRaw(epoch, shard, id, data)
		},
		Peer: func(t *testing.T, s store.Store) store.Store { return s.(*faultstore.Client).Net().Client("peer") },
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, backend()) }

func TestControlConformance(t *testing.T) { storetest.RunControl(t, backend()) }

func TestRestoreConformance(t *testing.T) { storetest.RunRestore(t, backend()) }

func TestBatchConformance(t *testing.T) { storetest.RunBatch(t, backend()) }
