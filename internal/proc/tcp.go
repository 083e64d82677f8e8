package proc

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// TCPConn is one established TCP connection of a process.
type TCPConn struct {
	Local, Remote netip.AddrPort
}

// TCPConns lists the process's established IPv4 TCP connections, from Linux's /proc: the sockets
// among its file descriptors, looked up in its network namespace's table. A fault test uses it to
// check that a process reaches its peers only through the proxies it was given.
func (p *Proc) TCPConns() ([]TCPConn, error) { return tcpConns(p.Pid()) }

func tcpConns(pid int) ([]TCPConn, error) {
	dir := fmt.Sprintf("/proc/%d", pid)
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return nil, err
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	f, err := os.Open(filepath.Join(dir, "net", "tcp"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []TCPConn
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || fields[3] != "01" || !inodes[fields[9]] { // 01: ESTABLISHED
			continue
		}
		local, err1 := parseProcAddr(fields[1])
		remote, err2 := parseProcAddr(fields[2])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("/proc/net/tcp line %q: %v %v", sc.Text(), err1, err2)
		}
		out = append(out, TCPConn{Local: local, Remote: remote})
	}
	return out, sc.Err()
}

// parseProcAddr parses /proc/net/tcp's "0100007F:1F90": the IPv4 address as a 32-bit word in the
// host's byte order (little-endian on every platform Go's tests run this on), the port in hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	ip, err := strconv.ParseUint(ipHex, 16, 32)
	if err != nil {
		return netip.AddrPort{}, err
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], uint32(ip))
	return netip.AddrPortFrom(netip.AddrFrom4(b), uint16(port)), nil
}
