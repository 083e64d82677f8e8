package natscmd

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/tickfence/tickfence/actor"
	"github.com/tickfence/tickfence/shard/wire"
)

// HeaderPlayer names the player a trusted sender acts for (a trusted gateway, an operator's
// tickctl). An untrusted sender is its player whatever it writes here.
const HeaderPlayer = "Tickfence-Player"

// trustedTag is the tag of a trusted gateway's credential (auth.TrustedTag).
const trustedTag = "trusted"

// HeaderRequestInfo is the header the NATS server sets on a request that crossed from one
// account into another through a service import whose importer shares its client's details
// (jwt.Import.Share): the requester's account, user and the name and tags of its credential.
// The server replaces any value a client wrote, so on such a request it is the server's word.
const HeaderRequestInfo = "Nats-Request-Info"

// requester is what the server says of a request's sender (the fields of its ClientInfo that
// tickfence reads).
type requester struct {
	Account string   `json:"acc"`
	User    string   `json:"user"`
	NameTag string   `json:"name_tag"`
	Tags    []string `json:"tags"`
}

func (r requester) key() string { return r.Account + "/" + r.User }

// requestInfo reads the server-injected identity of a request ("" fields when there is none).
func requestInfo(h nats.Header) requester {
	var r requester
	if v := h.Get(HeaderRequestInfo); v != "" {
		_ = json.Unmarshal([]byte(v), &r)
	}
	return r
}

// onceSet remembers up to onceSetMax keys, forgetting them all when full: first reports whether
// a key is new (a flood of distinct keys costs a bounded map and, after each reset, one line
// per key again).
type onceSet struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

const onceSetMax = 4096

func (o *onceSet) first(key string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.seen[key]; ok {
		return false
	}
	if o.seen == nil || len(o.seen) >= onceSetMax {
		o.seen = map[string]struct{}{}
	}
	o.seen[key] = struct{}{}
	return true
}

// sender is who sent m (DESIGN 9). A request that crossed from another account has a reply
// subject the server made (_R_.…) and the requester's details the server wrote over anything
// the client did (Nats-Request-Info, when the import shares them): that is an untrusted sender
// unless its credential is tagged trusted. Anything else was sent within the trusted account or
// on a server without credentials: trusted.
func sender(m *nats.Msg) (actor.Sender, error) {
	var s actor.Sender
	if strings.HasPrefix(m.Reply, "_R_.") {
		if ri := requestInfo(m.Header); ri.Account != "" {
			s = actor.Sender{Account: ri.Account, User: ri.User, Name: ri.NameTag, Tags: ri.Tags,
				Trusted: slices.Contains(ri.Tags, trustedTag)}
			if !s.Trusted {
				s.Player = s.Name
				return s, nil
			}
		}
	}
	if s.Account == "" {
		s.Trusted = true
	}
	if p := m.Header.Get(HeaderPlayer); p != "" {
		if len(p) > wire.MaxRequestID || strings.ContainsFunc(p, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
			return s, wire.Errorf(wire.CodeBadRequest, "header %s must be 1..%d printable ASCII characters without spaces", HeaderPlayer, wire.MaxRequestID)
		}
		s.Player = p
	}
	return s, nil
}
