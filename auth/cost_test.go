package auth_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/auth"
	"github.com/tickfence/tickfence/internal/natsserver"
)

// BenchmarkKVPutAuth measures what authentication costs a KV put: pipelined (64 in flight, as a
// node writes) and one at a time, on a server without auth and on one enforcing the roles with
// node credentials (in-process connections, memory storage); and over TCP on loopback without
// either and with both auth and TLS. Run it several times, interleaved:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench KVPutAuth ./auth; done
func BenchmarkKVPutAuth(b *testing.B) {
	for _, c := range []struct {
		name          string
		withAuth, tls bool
	}{{"open", false, false}, {"auth", true, false}, {"tcp-open", false, false}, {"tcp-auth-tls", true, true}} {
		withAuth := c.withAuth
		tcp := c.name[:3] == "tcp"
		dir := b.TempDir()
		cfg := natsserver.Config{DataDir: filepath.Join(dir, "js")}
		var opts []nats.Option
		if tcp {
			cfg.Listen = "127.0.0.1:0"
		}
		if c.tls {
			ca := filepath.Join(dir, "ca")
			if _, err := auth.InitTLS(ca, nil); err != nil {
				b.Fatal(err)
			}
			cfg.TLSCert, cfg.TLSKey = filepath.Join(ca, auth.TLSCert), filepath.Join(ca, auth.TLSCertKey)
			topts, _ := auth.TLSClientOptions(filepath.Join(ca, auth.TLSCA), "", "")
			opts = append(opts, topts...)
		}
		if withAuth {
			cfg.AuthDir = filepath.Join(dir, "auth")
			if _, err := auth.Init(cfg.AuthDir); err != nil {
				b.Fatal(err)
			}
			copts, err := auth.ClientOptions(auth.CredsFile(cfg.AuthDir, "node"), nil)
			if err != nil {
				b.Fatal(err)
			}
			opts = append(opts, copts...)
		}
		srv, err := natsserver.Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		url := srv.ClientURL()
		if !tcp {
			url, opts = "", append(opts, srv.ConnectOption())
		}
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			b.Fatal(err)
		}
		js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(64))
		// The bucket is made by whoever may shape storage (admin with the roles enforced; a node
		// may not), and written as a node writes its records (inst.<...> keys).
		mk := js
		if withAuth {
			admin, err := nats.Connect(url, append(opts[:len(opts):len(opts)], nats.UserCredentials(auth.CredsFile(cfg.AuthDir, "admin")),
				nats.CustomInboxPrefix(auth.InboxPrefix("admin")))...)
			if err != nil {
				b.Fatal(err)
			}
			defer admin.Close()
			mk, _ = jetstream.New(admin)
		}
		if _, err := mk.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "bench", Storage: jetstream.MemoryStorage}); err != nil {
			b.Fatal(err)
		}
		kv, err := js.KeyValue(context.Background(), "bench")
		if err != nil {
			b.Fatal(err)
		}
		val := make([]byte, 600)
		name := c.name
		b.Run(name+"/pipelined", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				for {
					_, err := js.PublishAsync(fmt.Sprintf("$KV.bench.inst.k%d", i%64), val)
					if err == nil {
						break
					}
					if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
						b.Fatal(err)
					}
					<-js.PublishAsyncComplete() // a loaded machine stalled the window: drain it and go on
				}
			}
			<-js.PublishAsyncComplete()
		})
		b.Run(name+"/one", func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, err := kv.Put(context.Background(), fmt.Sprintf("inst.k%d", i%64), val); err != nil {
					b.Fatal(err)
				}
			}
		})
		nc.Close()
		srv.Stop()
	}
}
