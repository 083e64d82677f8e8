package main

import (
	"slices"
	"strings"
	"testing"
)

// TestPlayerFlags: --nats-websocket is the embedded server's, so not with --nats; its origins
// default to this node's demo page on the metrics listener; --demo-page-nats is a ws(s) URL.
func TestPlayerFlags(t *testing.T) {
	for _, c := range []struct {
		o    options
		want string // in the error; "" for none
	}{
		{options{natsWebSocket: "127.0.0.1:4223"}, ""},
		{options{natsWebSocket: "127.0.0.1:4223", natsURL: "nats://127.0.0.1:4222"}, "tickd server --websocket"},
		{options{natsWSOrigins: "http://x:1"}, "needs --nats-websocket"},
		{options{demoPageNATS: "ws://127.0.0.1:4223"}, ""},
		{options{demoPageNATS: "wss://nats.example:443"}, ""},
		{options{demoPageNATS: "nats://127.0.0.1:4222"}, "ws:// or wss://"},
	} {
		err := checkPlayerFlags(c.o)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	ws := options{natsWebSocket: "127.0.0.1:4223"}
	for addr, want := range map[string][]string{
		"127.0.0.1:9464": {"http://127.0.0.1:9464", "http://localhost:9464"},
		"10.0.0.5:9464":  {"http://10.0.0.5:9464"},
		"0.0.0.0:9464":   nil, // unknown: natsserver asks for --nats-websocket-origin
		"":               nil, // no metrics listener, no page
	} {
		if got := webSocketOrigins(ws, addr); !slices.Equal(got, want) {
			t.Errorf("origins with --metrics %q: %v, want %v", addr, got, want)
		}
	}
	ws.natsWSOrigins = "https://demo.example,http://127.0.0.1:8080"
	if got := webSocketOrigins(ws, "127.0.0.1:9464"); !slices.Equal(got, []string{"https://demo.example", "http://127.0.0.1:8080"}) {
		t.Errorf("origins with --nats-websocket-origin: %v", got)
	}
	if got := webSocketOrigins(options{}, "127.0.0.1:9464"); got != nil {
		t.Errorf("origins without --nats-websocket: %v", got)
	}
}
