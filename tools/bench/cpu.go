package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times: 100 on every Linux the
// bench runs on.
const clockTicks = 100

// serverCPU reads the CPU time the bench's own PostgreSQL and Kafka processes have used, so
// that a scenario can report what each of the three processes sharing the machine's cores
// cost during a cdc run. It finds them by their command lines, which name the state folder.
type serverCPU struct {
	stateDir string
}

// cpuSample is the CPU seconds used so far by PostgreSQL (the postmaster, its live children
// and the children it reaped) and by the Kafka broker.
type cpuSample struct {
	postgres, broker float64
	ok               bool
}

// sample returns the current totals; ok is false when the servers are not the bench's own
// (CDC_TEST_* services) or cannot be found.
func (m *serverCPU) sample() cpuSample {
	if m == nil || m.stateDir == "" {
		return cpuSample{}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return cpuSample{}
	}
	type proc struct {
		ppid               int
		self, children     float64
		postmaster, broker bool
	}
	procs := make(map[int]proc)
	pgDir := filepath.Join(m.stateDir, "postgres")
	kafkaDir := filepath.Join(m.stateDir, "kafka")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readProcStat(pid)
		if !ok {
			continue
		}
		p := proc{ppid: st.ppid, self: st.self, children: st.children}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(cmd, []byte(pgDir)) && bytes.Contains(cmd, []byte("postgres")) {
			p.postmaster = true
		}
		if bytes.Contains(cmd, []byte(kafkaDir)) && bytes.Contains(cmd, []byte("java")) {
			p.broker = true
		}
		procs[pid] = p
	}
	var s cpuSample
	var havePG, haveBroker bool
	for pid, p := range procs {
		switch {
		case p.postmaster:
			havePG = true
			s.postgres += p.self + p.children
			for _, c := range procs {
				if c.ppid == pid {
					s.postgres += c.self
				}
			}
		case p.broker:
			haveBroker = true
			s.broker += p.self
		}
	}
	s.ok = havePG && haveBroker
	return s
}

// procStat is what the bench reads of /proc/<pid>/stat: the parent and the CPU seconds the
// process used itself (user + system) and that its reaped children used.
type procStat struct {
	ppid           int
	self, children float64
}

// readProcStat reads /proc/<pid>/stat; ok is false when the process is gone or the file is
// not as expected.
func readProcStat(pid int) (procStat, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	return parseProcStat(stat)
}

// parseProcStat parses one /proc/<pid>/stat line.
func parseProcStat(stat []byte) (procStat, bool) {
	// The fields after the command, which is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 15 {
		return procStat{}, false
	}
	num := func(k int) float64 { v, _ := strconv.ParseFloat(f[k], 64); return v / clockTicks }
	// f[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, false
	}
	return procStat{ppid: ppid, self: num(11) + num(12), children: num(13) + num(14)}, true
}

// since returns the CPU seconds used between before and s.
func (s cpuSample) since(before cpuSample) (postgres, broker float64, ok bool) {
	if !s.ok || !before.ok {
		return 0, 0, false
	}
	return s.postgres - before.postgres, s.broker - before.broker, true
}

// printCPUShare prints what each process cost per million records while cdc ran, and the
// rate the machine's cores would allow if that CPU were all that limited it: the three
// processes share the cores, while each limit is measured with one side alone.
func printCPUShare(w io.Writer, label string, count int64, seconds, cdc, postgres, broker float64, cpus string) {
	if count <= 0 || seconds <= 0 || (postgres == 0 && broker == 0) {
		return
	}
	n, err := strconv.Atoi(cpus)
	if err != nil || n < 1 {
		return
	}
	per := 1e6 / float64(count)
	sum := cdc + postgres + broker
	fmt.Fprintf(w, "   %s CPU per 1,000,000 records: cdc %.2fs, PostgreSQL %.2fs, broker %.2fs = %.2fs; %.2f of %d cores busy on average; all %d cores busy would allow %s records/s\n",
		label, cdc*per, postgres*per, broker*per, sum*per, sum/seconds, n, n, thousands(int64(float64(n)*float64(count)/sum)))
}

// hostCPU is the machine's CPU time from the first line of /proc/stat, in ticks.
type hostCPU struct {
	steal, total uint64
	ok           bool
}

// readHostCPU reads /proc/stat; ok is false where it cannot.
func readHostCPU() hostCPU {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostCPU{}
	}
	return parseHostCPU(data)
}

// parseHostCPU parses the "cpu" line: user nice system idle iowait irq softirq steal guest
// guest_nice. Guest time is already counted in user and nice.
func parseHostCPU(data []byte) hostCPU {
	line, _, _ := bytes.Cut(data, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 9 || f[0] != "cpu" {
		return hostCPU{}
	}
	var h hostCPU
	for i, s := range f[1:9] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return hostCPU{}
		}
		h.total += v
		if i == 7 {
			h.steal = v
		}
	}
	h.ok = true
	return h
}

// stealPercent is the share of the machine's CPU time between before and h that the
// hypervisor gave to other guests: time every process here waited for a core it was due.
func (h hostCPU) stealPercent(before hostCPU) (float64, bool) {
	if !h.ok || !before.ok || h.total <= before.total {
		return 0, false
	}
	return 100 * float64(h.steal-before.steal) / float64(h.total-before.total), true
}

// selfCPU returns the CPU seconds (user and system) the bench process has used so far, its
// children not included.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
