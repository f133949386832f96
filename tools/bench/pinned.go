package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
)

// The pinned catch-up (-pin, stream scenario) stands in for a deployment where cdc has a core
// of its own: cdc runs on CPU 0 (taskset -c 0), PostgreSQL (the postmaster, so every backend
// it forks, the walsender included) and the broker on CPU 1 (taskset -a -p), and the READ
// limit is measured the same way, the Go reader (this process) on CPU 0 and the servers on
// CPU 1, from a slot of its own that holds the same backlog.

// cpusVar is the pseudo variable of a cdc run's vars that startCDC runs cdc under taskset
// with (its value is taskset's CPU list); it does not reach cdc's environment.
const cpusVar = "BENCH_TASKSET_CPUS"

// pinnedRun is the pinned catch-up against the pinned READ limit.
type pinnedRun struct {
	CDCCPUs    string     `json:"cdc_cpus"`
	ServerCPUs string     `json:"server_cpus"`
	Read       throughput `json:"read"`
	catchUp
	// ReadRatio is the catch-up's changes/s over the pinned READ limit's.
	ReadRatio float64 `json:"ratio_cdc_to_read"`
}

// pinLane returns the lane of the pinned catch-up, or nil without -pin or when it cannot run.
func (s *scenario) pinLane(exports []change.ExportID) *lane {
	if !s.b.o.pin {
		return nil
	}
	if why := s.b.canPin(); why != "" {
		s.b.logf("stream: no pinned catch-up: %s", why)
		return nil
	}
	return s.newLane(deliveryExactlyOnce, "pin", exports)
}

// createSlot creates a pgoutput slot and returns its start position.
func createSlot(ctx context.Context, conn *pgx.Conn, slot string) (change.LSN, error) {
	var lsn string
	if err := conn.QueryRow(ctx, "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", slot).Scan(&lsn); err != nil {
		return 0, fmt.Errorf("create slot %s: %w", slot, err)
	}
	return change.ParseLSN(lsn)
}

// pinnedSlot names the pinned READ limit's slot.
func (s *scenario) pinnedSlot() string { return s.slot + "_pread" }

// canPin says why the pinned run cannot happen ("" when it can): it needs two CPUs, taskset and
// the bench's own servers (their processes are found by their state folder).
func (b *bench) canPin() string {
	switch {
	case runtime.NumCPU() < 2:
		return "one CPU"
	case b.svc.cpu == nil || b.svc.cpu.stateDir == "":
		return "the servers are not the bench's own (CDC_TEST_*)"
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		return "no taskset (util-linux)"
	}
	return ""
}

// pinnedCatchUp measures the pinned READ limit from slot (created before the backlog at start)
// and the pinned catch-up of lane l, with the servers pinned to CPU 1 meanwhile.
func (s *scenario) pinnedCatchUp(ctx context.Context, conn *pgx.Conn, res *streamResult, l *lane, start, target change.LSN) (*pinnedRun, error) {
	b := s.b
	all := fmt.Sprintf("0-%d", runtime.NumCPU()-1)
	run := &pinnedRun{CDCCPUs: "0", ServerCPUs: "1"}
	pids := serverPIDs(b.svc.cpu.stateDir)
	if len(pids) == 0 {
		return nil, fmt.Errorf("no server processes found under %s", b.svc.cpu.stateDir)
	}
	if err := taskset(run.ServerCPUs, pids...); err != nil {
		return nil, err
	}
	defer func() {
		if err := taskset(all, serverPIDs(b.svc.cpu.stateDir)...); err != nil {
			b.logf("stream: unpin the servers: %v", err)
		}
	}()

	b.logf("stream: pinned READ limit (Go reader on CPU %s, servers on CPU %s)", run.CDCCPUs, run.ServerCPUs)
	if err := taskset(run.CDCCPUs, os.Getpid()); err != nil {
		return nil, err
	}
	rd, err := readStream(ctx, s.db.url, s.pinnedSlot(), s.pub, start, res.BacklogTxns)
	if uerr := taskset(all, os.Getpid()); uerr != nil {
		b.logf("stream: unpin the bench: %v", uerr)
	}
	if err != nil {
		return nil, fmt.Errorf("pinned read limit: %w", err)
	}
	if err := dropSlot(ctx, conn, s.pinnedSlot()); err != nil {
		return nil, err
	}
	run.Read = newThroughput(rd.changes, rd.bytes, rd.elapsed, fmt.Sprintf("%d transactions, pinned", rd.commits))

	l.vars[cpusVar] = run.CDCCPUs
	if run.catchUp, _, err = l.catchUp(ctx, target, res.Changes); err != nil {
		return nil, err
	}
	run.ReadRatio = over(run.CDC.PerSecond, run.Read.PerSecond)
	b.logf("stream: pinned: READ %.0f changes/s, cdc %.0f changes/s = %.2f of it", run.Read.PerSecond, run.CDC.PerSecond, run.ReadRatio)
	return run, nil
}

// taskset sets the CPUs of every thread of each process (taskset -a -p).
func taskset(cpus string, pids ...int) error {
	for _, pid := range pids {
		out, err := exec.Command("taskset", "-a", "-p", "-c", cpus, strconv.Itoa(pid)).CombinedOutput()
		if err != nil && processAlive(pid) {
			return fmt.Errorf("taskset -a -p -c %s %d: %w: %s", cpus, pid, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

func processAlive(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return err == nil
}

// serverPIDs returns the PostgreSQL postmaster and its children, and the broker, of the servers
// whose state is in stateDir (as serverCPU finds them).
func serverPIDs(stateDir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	pgDir, kafkaDir := filepath.Join(stateDir, "postgres"), filepath.Join(stateDir, "kafka")
	parents := make(map[int]int)
	var pids []int
	postmasters := make(map[int]bool)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, ok := readProcStat(pid)
		if !ok {
			continue
		}
		parents[pid] = st.ppid
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		switch {
		case bytes.Contains(cmd, []byte(pgDir)) && bytes.Contains(cmd, []byte("postgres")):
			postmasters[pid] = true
			pids = append(pids, pid)
		case bytes.Contains(cmd, []byte(kafkaDir)) && bytes.Contains(cmd, []byte("java")):
			pids = append(pids, pid)
		}
	}
	for pid, ppid := range parents {
		if postmasters[ppid] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// printPinned prints the pinned catch-up beside its READ limit.
func printPinned(w io.Writer, p *pinnedRun) {
	if p == nil {
		return
	}
	fmt.Fprintf(w, "  pinned (cdc and the Go reader on CPU %s, PostgreSQL and the broker on CPU %s):\n", p.CDCCPUs, p.ServerCPUs)
	fmt.Fprintf(w, "    READ (Go reader)  %10.0f changes/s\n", p.Read.PerSecond)
	fmt.Fprintf(w, "    cdc exactly-once  %10.0f changes/s = %.2f of READ (process start -> caught up; from replication start %.0f = %.2f); cdc CPU %.2f s, walsender %.2f s\n",
		p.CDC.PerSecond, p.ReadRatio, p.CDCAfterStartup.PerSecond, over(p.CDCAfterStartup.PerSecond, p.Read.PerSecond), p.CPUSeconds, p.WalsenderCPUSeconds)
}
