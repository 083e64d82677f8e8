package main

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/tickfence/tickfence"
	"github.com/tickfence/tickfence/internal/playerpage"
)

// playerPage is the player demo page on the --metrics listener, under /demo/ (package
// playerpage). Its browser talks NATS over WebSocket: to the embedded server's --nats-websocket,
// or to the URL --demo-page-nats gives (tickd server --websocket).
type playerPage struct {
	o    options
	addr string // the metrics listener's address, once it listens
	node atomic.Pointer[tickfence.Node]
}

const playerPath = "/demo/"

func (p *playerPage) handler() http.Handler {
	return playerpage.Handler(playerPath, func() playerpage.Config {
		c := playerpage.Config{NATS: p.o.demoPageNATS, Demo: p.o.demo, Node: p.o.nodeID}
		if n := p.node.Load(); n != nil {
			c.Shards = n.Cluster().Shards
			if c.NATS == "" {
				c.NATS = n.WebSocketURL()
			}
		}
		return c
	})
}

// checkPlayerFlags refuses the flags that cannot work together.
func checkPlayerFlags(o options) error {
	if o.natsWebSocket != "" && o.natsURL != "" {
		return errors.New("--nats-websocket is a listener of the embedded server, and --nats (or $NATS_URL) names an external one: " +
			"give that server a WebSocket listener (tickd server --websocket HOST:PORT) and this node --demo-page-nats ws://HOST:PORT")
	}
	if o.natsWSOrigins != "" && o.natsWebSocket == "" {
		return errors.New("--nats-websocket-origin needs --nats-websocket")
	}
	if u := o.demoPageNATS; u != "" && !strings.HasPrefix(u, "ws://") && !strings.HasPrefix(u, "wss://") {
		return errors.New("--demo-page-nats must be a ws:// or wss:// URL (a NATS server's WebSocket listener: tickd server --websocket)")
	}
	return nil
}

// webSocketOrigins are the page origins the embedded server's WebSocket listener accepts:
// --nats-websocket-origin, or else this node's own demo page on the metrics listener (as
// http://127.0.0.1:PORT and http://localhost:PORT when it listens on loopback). None when
// the metrics listener is on every interface: natsserver then asks for the flag.
func webSocketOrigins(o options, metricsAddr string) []string {
	if o.natsWebSocket == "" {
		return nil
	}
	if o.natsWSOrigins != "" {
		return strings.Split(o.natsWSOrigins, ",")
	}
	host, port, err := net.SplitHostPort(metricsAddr)
	if err != nil || host == "" || host == "0.0.0.0" || host == "::" {
		return nil
	}
	origins := []string{"http://" + net.JoinHostPort(host, port)}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		origins = append(origins, "http://"+net.JoinHostPort("localhost", port))
	}
	return origins
}
