package main

// The cluster scenario's CPU accounting: each server's, each node's and tickbench's own CPU time
// over the window (from /proc/<pid>/stat), and the whole machine's (from /proc/stat): the CPU the
// other processes took, and the time the hypervisor gave the vCPUs to someone else (steal).

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tickfence/tickfence/internal/proc"
)

// cpuMeter samples the CPU time of the cluster's processes (a process that dies keeps the CPU
// of its last sample) and of the machine.
type cpuMeter struct {
	mu     sync.Mutex
	procs  []*meteredProc
	stat   [2]procStat // the first and the last sample
	stated bool
	at     [2]time.Time
}

type meteredProc struct {
	name, role  string // role: server, node, tickbench
	pid         int
	first, last float64 // CPU seconds
	seen        bool
}

func newCPUMeter(b *benchCluster) *cpuMeter {
	m := &cpuMeter{}
	for _, s := range b.servers {
		m.procs = append(m.procs, &meteredProc{name: s.Name, role: "server", pid: s.proc.Pid()})
	}
	for _, id := range b.ids {
		if n := b.Node(id); n != nil {
			m.procs = append(m.procs, &meteredProc{name: id, role: "node", pid: n.Pid()})
		}
	}
	m.procs = append(m.procs, &meteredProc{name: "tickbench", role: "tickbench", pid: os.Getpid()})
	return m
}

// sample reads every process's CPU time and the machine's counters.
func (m *cpuMeter) sample() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.procs {
		v := procCPU(p.pid)
		if v < 0 {
			continue // gone: its last sample stands
		}
		if !p.seen {
			p.first, p.seen = v, true
		}
		p.last = v
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return
	}
	st, ok := parseProcStat(string(b))
	if !ok {
		return
	}
	if !m.stated {
		m.stat[0], m.at[0], m.stated = st, time.Now(), true
	}
	m.stat[1], m.at[1] = st, time.Now()
}

// sampleProc is sample for one process, right before a fault ends it.
func (m *cpuMeter) sampleProc(p *proc.Proc) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mp := range m.procs {
		if mp.pid == p.Pid() {
			if v := procCPU(mp.pid); v >= 0 && mp.seen {
				mp.last = v
			}
		}
	}
}

// procStat is the machine's CPU time from the first line of /proc/stat, in seconds over every CPU.
type procStat struct {
	busy  float64 // user, nice, system, irq, softirq
	idle  float64 // idle, iowait
	steal float64
}

func (s procStat) total() float64 { return s.busy + s.idle + s.steal }

// parseProcStat reads the "cpu " line of /proc/stat (USER_HZ = 100 on Linux).
func parseProcStat(text string) (procStat, bool) {
	for _, l := range strings.Split(text, "\n") {
		f := strings.Fields(l)
		if len(f) < 9 || f[0] != "cpu" {
			continue
		}
		var v [8]float64
		for i := range v {
			x, err := strconv.ParseFloat(f[i+1], 64)
			if err != nil {
				return procStat{}, false
			}
			v[i] = x / 100
		}
		// user nice system idle iowait irq softirq steal (guest time is counted in user)
		return procStat{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3] + v[4], steal: v[7]}, true
	}
	return procStat{}, false
}

// procCPUResult is one process's CPU time over the window.
type procCPUResult struct {
	Name string  `json:"name"`
	Role string  `json:"role"` // server, node, tickbench
	CPU  float64 `json:"cpu_s"`
}

// cpuResult is where the CPU went over the window.
type cpuResult struct {
	Seconds float64         `json:"window_s"`
	CPUs    int             `json:"cpus"`
	Procs   []procCPUResult `json:"procs"`
	Servers float64         `json:"servers_cpu_s"`
	Nodes   float64         `json:"nodes_cpu_s"`
	Bench   float64         `json:"tickbench_cpu_s"` // the load generator, the scrapes and the fault's reads
	// Busy is the machine's busy CPU time; Others what processes other than these took of it.
	Busy     float64 `json:"machine_busy_cpu_s"`
	Others   float64 `json:"others_cpu_s"`
	IdlePct  float64 `json:"idle_pct"`  // of all the CPUs' time
	StealPct float64 `json:"steal_pct"` // of all the CPUs' time: taken by the hypervisor for other guests
	// CPU time per 1 000 fenced records written ok.
	ServerMsPerK float64 `json:"server_cpu_ms_per_1k_records"`
	NodeMsPerK   float64 `json:"node_cpu_ms_per_1k_records"`
}

// result is the CPU over the window; records are the fenced records written in it.
func (m *cpuMeter) result(records float64) cpuResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := cpuResult{Seconds: m.at[1].Sub(m.at[0]).Seconds(), CPUs: runtime.NumCPU()}
	for _, p := range m.procs {
		c := p.last - p.first
		r.Procs = append(r.Procs, procCPUResult{Name: p.name, Role: p.role, CPU: c})
		switch p.role {
		case "server":
			r.Servers += c
		case "node":
			r.Nodes += c
		default:
			r.Bench += c
		}
	}
	d := procStat{busy: m.stat[1].busy - m.stat[0].busy, idle: m.stat[1].idle - m.stat[0].idle, steal: m.stat[1].steal - m.stat[0].steal}
	r.Busy = d.busy
	r.Others = max(0, d.busy-r.Servers-r.Nodes-r.Bench)
	if t := d.total(); t > 0 {
		r.IdlePct, r.StealPct = 100*d.idle/t, 100*d.steal/t
	}
	if records > 0 {
		r.ServerMsPerK, r.NodeMsPerK = 1e6*r.Servers/records, 1e6*r.Nodes/records
	}
	return r
}

// cpuLine is one line on where the CPU went.
func (r cpuResult) line() string {
	var srv, nodes []string
	for _, p := range r.Procs {
		switch p.Role {
		case "server":
			srv = append(srv, fmt.Sprintf("%s %.1f", p.Name, p.CPU))
		case "node":
			nodes = append(nodes, fmt.Sprintf("%s %.1f", p.Name, p.CPU))
		}
	}
	return fmt.Sprintf("CPU over %.1f s (%d CPUs: %.0f CPU-s): servers %.1f CPU-s (%s), nodes %.1f (%s), tickbench %.1f, other processes %.1f; idle %.0f %%, steal %.1f %%",
		r.Seconds, r.CPUs, r.Seconds*float64(r.CPUs), r.Servers, strings.Join(srv, ", "), r.Nodes, strings.Join(nodes, ", "),
		r.Bench, r.Others, r.IdlePct, r.StealPct)
}
