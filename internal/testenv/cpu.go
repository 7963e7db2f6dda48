package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// CPUMeter measures the CPU time the benchmark's own process and the
// servers it drives spend while a case runs, so that a benchmark can report
// what each message costs the machine, whatever else the machine runs: on
// a machine whose cores the consumer and its servers share, messages/s
// cannot exceed the cores divided by the CPU time one message costs them.
type CPUMeter struct {
	servers []string // the process names (comm) of the servers
	self    time.Duration
	procs   map[int]time.Duration // CPU time of each server process at the start
}

// tick is the unit of the CPU times in /proc/<pid>/stat: 1/CLK_TCK s,
// 100 on Linux everywhere.
const tick = 10 * time.Millisecond

// NewCPUMeter starts measuring the CPU time of this process and of the
// processes named (their comm, as ps -o comm prints it) servers.
func NewCPUMeter(servers ...string) *CPUMeter {
	m := &CPUMeter{servers: servers}
	m.self, m.procs = selfCPU(), m.serverCPU()
	return m
}

// Report reports, per message of n, the CPU time of this process
// ("cpu-µs/msg") and of each server ("<name>-µs/msg"). A server process
// that started during the case counts from zero; one that ended is lost.
func (m *CPUMeter) Report(b *testing.B, n int) {
	self := selfCPU() - m.self
	b.ReportMetric(float64(self.Microseconds())/float64(n), "cpu-µs/msg")
	byName := make(map[string]time.Duration)
	for pid, t := range m.serverCPU() {
		byName[comm(pid)] += t - m.procs[pid]
	}
	for _, name := range m.servers {
		b.ReportMetric(float64(byName[name].Microseconds())/float64(n), name+"-µs/msg")
	}
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns the CPU time of every process named one of m.servers.
func (m *CPUMeter) serverCPU() map[int]time.Duration {
	out := make(map[int]time.Duration)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		name := comm(pid)
		for _, s := range m.servers {
			if name != s {
				continue
			}
			stat, err := os.ReadFile(filepath.Join(d, "stat"))
			if err != nil {
				break
			}
			// The fields after the command, which is in parentheses: state
			// is the 3rd field, utime the 14th and stime the 15th.
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			if len(f) < 13 {
				break
			}
			ut, _ := strconv.Atoi(f[11])
			st, _ := strconv.Atoi(f[12])
			out[pid] = time.Duration(ut+st) * tick
		}
	}
	return out
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}
