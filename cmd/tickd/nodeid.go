package main

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// defaultNodeID derives a valid node ID (store.ValidID: 1..64 of A-Z a-z 0-9 _ -) from a host
// name, the default of --node-id: the first label of the name (web-1 of web-1.example.com, as
// hostname -s), lowercased (host names are case-insensitive), every other byte replaced by '-'
// (runs of them collapsed, none at either end); longer than 64, the first 55 and a hash of the
// whole name. An empty result (no host name, or only other characters) is "tickd".
func defaultNodeID(host string) string {
	label := host
	if i := strings.IndexByte(host, '.'); i > 0 {
		label = host[:i]
	}
	var b strings.Builder
	dash := false
	for i := 0; i < len(label); i++ {
		c := label[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
		case c == '-':
		default:
			c = '-'
		}
		if c == '-' {
			if dash || b.Len() == 0 {
				continue
			}
			dash = true
		} else {
			dash = false
		}
		b.WriteByte(c)
	}
	id := strings.TrimRight(b.String(), "-")
	if len(id) > 64 {
		h := fnv.New32a()
		h.Write([]byte(host))
		id = fmt.Sprintf("%s-%08x", strings.TrimRight(id[:55], "-"), h.Sum32())
	}
	if id == "" {
		return "tickd"
	}
	return id
}
