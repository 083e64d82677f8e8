// Package natscmd carries commands over NATS with the wire format of package wire: Server
// subscribes the shards a node owns, Client sends commands and retries them with the same request
// ID until an owner answers (game servers and gateways written in Go use it).
package natscmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/internal/metrics"
	"github.com/tickfence/tickfence/shard"
	"github.com/tickfence/tickfence/shard/wire"
	"github.com/tickfence/tickfence/store"
)

// Server implements shard.Commands on a NATS connection.
type Server struct {
	nc      *nats.Conn
	shards  uint32
	metrics *metrics.Node
}

var _ shard.Commands = (*Server)(nil)

// NewServer serves commands for a cluster of the given shard count.
func NewServer(nc *nats.Conn, shards uint32, m *metrics.Node) *Server {
	return &Server{nc: nc, shards: shards, metrics: m}
}

// Serve implements shard.Commands: it subscribes tickfence.cmd.<S>.*.
func (s *Server) Serve(sh uint32, handle func(shard.Command)) (func(), error) {
	sub, err := s.nc.Subscribe(wire.ShardSubject(sh), func(m *nats.Msg) {
		received := time.Now()
		if m.Reply == "" {
			return // a publish, not a request: there is no one to answer
		}
		asJSON := strings.HasPrefix(m.Header.Get(wire.HeaderContent), wire.ContentJSON)
		reply := func(b []byte) {
			out := nats.NewMsg(m.Reply)
			out.Data = wire.ForClient(b, asJSON)
			if asJSON {
				out.Header.Set(wire.HeaderContent, wire.ContentJSON)
			}
			_ = s.nc.PublishMsg(out) // the requester retries if this is lost
		}
		req, err := wire.DecodeRequest(m.Subject, m.Header.Get(wire.HeaderRequestID), m.Header.Get(wire.HeaderContent), m.Data, s.shards)
		if err != nil {
			werr := &wire.Error{}
			if !errors.As(err, &werr) {
				werr = wire.Errorf(wire.CodeBadRequest, "%v", err)
			}
			if s.metrics != nil {
				s.metrics.Commands.WithLabelValues(werr.Code).Inc()
			}
			reply(wire.EncodeReply(wire.Reply{Error: werr}))
			return
		}
		handle(shard.Command{Request: req, Received: received, Reply: reply})
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", wire.ShardSubject(sh), err)
	}
	if err := sub.SetPendingLimits(65536, 64<<20); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// Client sends commands to instances.
type Client struct {
	nc     *nats.Conn
	shards uint32
	// Attempt bounds one request/reply round trip (default 2s).
	Attempt time.Duration
}

// NewClient makes a client for a cluster with the given shard count (the cluster record's).
func NewClient(nc *nats.Conn, shards uint32) *Client {
	return &Client{nc: nc, shards: shards, Attempt: 2 * time.Second}
}

// Retryable reports the error codes after which the same request ID should be sent again.
func Retryable(code string) bool { return code == wire.CodeRetry || code == wire.CodeNotOwner }

// Send sends one command (a msgpack or JSON map) and waits for its answer, retrying with the same
// request ID while no owner answers or the owner says retry, until ctx ends. It returns the final
// reply as sent by the owner (msgpack, or JSON if asJSON) and decoded.
func (c *Client) Send(ctx context.Context, instance, requestID string, body []byte, asJSON bool) ([]byte, wire.Reply, error) {
	if err := store.ValidID(instance); err != nil {
		return nil, wire.Reply{}, err
	}
	subject := wire.Subject(store.ShardOf(instance, c.shards), instance)
	backoff := 20 * time.Millisecond
	var last error
	for {
		m := nats.NewMsg(subject)
		m.Data = body
		m.Header.Set(wire.HeaderRequestID, requestID)
		if asJSON {
			m.Header.Set(wire.HeaderContent, wire.ContentJSON)
		}
		actx, cancel := context.WithTimeout(ctx, c.Attempt)
		resp, err := c.nc.RequestMsgWithContext(actx, m)
		cancel()
		if err == nil {
			r, derr := wire.DecodeReply(resp.Data, asJSON)
			if derr != nil {
				return resp.Data, r, derr
			}
			if r.OK || !Retryable(r.Error.Code) {
				return resp.Data, r, nil
			}
			last = r.Error
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return nil, wire.Reply{}, fmt.Errorf("command %s to %s: gave up: %w (last: %v)", requestID, instance, ctx.Err(), last)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// SendMap encodes cmd as msgpack and sends it.
func (c *Client) SendMap(ctx context.Context, instance, requestID string, cmd map[string]any) (wire.Reply, error) {
	body, err := wire.Canonical(cmd)
	if err != nil {
		return wire.Reply{}, err
	}
	_, r, err := c.Send(ctx, instance, requestID, body, false)
	return r, err
}
