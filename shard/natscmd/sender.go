package natscmd

import (
	"encoding/json"
	"sync"

	"github.com/nats-io/nats.go"
)

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
