package proc

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
)

func TestTCPConns(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conns, err := tcpConns(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []TCPConn{
		{Local: netip.MustParseAddrPort(c.LocalAddr().String()), Remote: netip.MustParseAddrPort(c.RemoteAddr().String())},
		{Local: netip.MustParseAddrPort(s.LocalAddr().String()), Remote: netip.MustParseAddrPort(s.RemoteAddr().String())},
	} {
		if !slices.Contains(conns, want) {
			t.Fatalf("connection %v not among this process's %v", want, conns)
		}
	}
}

func TestParseProcAddr(t *testing.T) {
	for in, want := range map[string]string{"0100007F:1F90": "127.0.0.1:8080", "0200007F:0050": "127.0.0.2:80", "00000000:0000": "0.0.0.0:0"} {
		got, err := parseProcAddr(in)
		if err != nil || got.String() != want {
			t.Errorf("parseProcAddr(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0100007F", "XYZ:1F90", "0100007F:FFFFF"} {
		if _, err := parseProcAddr(bad); err == nil {
			t.Errorf("parseProcAddr(%q) gave no error", bad)
		}
	}
}
