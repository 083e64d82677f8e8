package main

import (
	"strings"
	"testing"

	"github.com/tickfence/tickfence/store"
)

func TestDefaultNodeID(t *testing.T) {
	long := strings.Repeat("a", 70)
	for host, want := range map[string]string{
		"n1":                          "n1",
		"web-1.example.com":           "web-1",
		"WEB-1.Example.COM":           "web-1",
		"Build_Box_7":                 "build_box_7",
		"ip-10-0-0-1.ec2.internal":    "ip-10-0-0-1",
		"tickd-0.tickd.ns.svc":        "tickd-0",
		"my host (2)":                 "my-host-2",
		"Ünï_Cödé.host":               "n-_c-d",
		"-lead--dash-":                "lead-dash",
		"":                            "tickd",
		"...":                         "tickd",
		".hidden":                     "hidden",
		"ÜÖ":                          "tickd",
		strings.Repeat("x", 64):       strings.Repeat("x", 64),
		"MacBook-Pro-de-Zoë.local":    "macbook-pro-de-zo",
		"a_very_long_name" + long[:2]: "a_very_long_nameaa",
	} {
		got := defaultNodeID(host)
		if got != want {
			t.Errorf("defaultNodeID(%q) = %q, want %q", host, got, want)
		}
		if err := store.ValidID(got); err != nil {
			t.Errorf("defaultNodeID(%q) = %q: %v", host, got, err)
		}
	}
	// Longer than 64: cut, with a hash of the whole name, so two long names stay apart.
	a, b := defaultNodeID(long+"1"), defaultNodeID(long+"2")
	if a == b || len(a) > 64 || !strings.HasPrefix(a, long[:55]) || store.ValidID(a) != nil || store.ValidID(b) != nil {
		t.Errorf("long names: %q, %q", a, b)
	}
	if defaultNodeID(long+"1") != a {
		t.Error("not deterministic")
	}
}
