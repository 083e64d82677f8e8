package natscmd_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickfence/tickfence/shard/natscmd"
)

// TestEffectsStreamShapesThatDropEffects (a review of issue 34.2's fix): shapes that drop, or let
// someone drop, acknowledged effects are refused as memory storage or interest retention are.
func TestEffectsStreamShapesThatDropEffects(t *testing.T) {
	for name, edit := range map[string]func(*jetstream.StreamConfig){
		"max age 1 minute (effects gone before a consumer runs)":                  func(c *jetstream.StreamConfig) { c.MaxAge = time.Minute },
		"one message per subject (an instance's older effects of a kind dropped)": func(c *jetstream.StreamConfig) { c.MaxMsgsPerSubject = 1 },
		"max 100 messages, discard old":                                           func(c *jetstream.StreamConfig) { c.MaxMsgs = 100 },
		"max 1 MiB, discard old":                                                  func(c *jetstream.StreamConfig) { c.MaxBytes = 1 << 20 },
		"roll-ups allowed (a node's fx publish with Nats-Rollup: all purges it)":  func(c *jetstream.StreamConfig) { c.AllowRollup = true },
		"per-message TTL (a publisher's Nats-TTL expires an effect)":              func(c *jetstream.StreamConfig) { c.AllowMsgTTL = true },
		"no acks (publishes never confirmed)":                                     func(c *jetstream.StreamConfig) { c.NoAck = true },
		"max message size 1 KiB":                                                  func(c *jetstream.StreamConfig) { c.MaxMsgSize = 1024 },
		"sealed":                                                                  func(c *jetstream.StreamConfig) { c.Sealed = true },
	} {
		cfg := natscmd.EffectsStreamConfig(3)
		edit(&cfg)
		if err := natscmd.CheckEffectsStream(cfg, 3); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
