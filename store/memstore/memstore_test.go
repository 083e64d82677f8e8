package memstore_test

import (
	"testing"

	"github.com/tickfence/tickfence/store"
	"github.com/tickfence/tickfence/store/memstore"
	"github.com/tickfence/tickfence/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Backend{
		New: func(t *testing.T) store.Store { return memstore.New() },
		PutRaw: func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte) {
			s.(*memstore.Store).PutRaw(epoch, shard, id, data)
		},
	})
}

func TestControlConformance(t *testing.T) {
	storetest.RunControl(t, storetest.Backend{
		New: func(t *testing.T) store.Store { return memstore.New() },
		PutRaw: func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte) {
			s.(*memstore.Store).PutRaw(epoch, shard, id, data)
		},
	})
}

func TestRestoreConformance(t *testing.T) {
	storetest.RunRestore(t, storetest.Backend{
		New: func(t *testing.T) store.Store { return memstore.New() },
		PutRaw: func(t *testing.T, s store.Store, epoch uint64, shard uint32, id string, data []byte) {
			s.(*memstore.Store).PutRaw(epoch, shard, id, data)
		},
	})
}

func TestBatchConformance(t *testing.T) {
	storetest.RunBatch(t, storetest.Backend{
		New: func(t *testing.T) store.Store { return memstore.New() },
	})
}
