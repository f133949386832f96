package main

import (
	"context"
	"fmt"
	"io"
)

// serversLimit is one phase measured against the servers' own cost: the rate PostgreSQL and
// the broker would reach on the machine's cores if cdc cost nothing, from the CPU time per
// record each of them spent in the same run (/proc). On a deployment cdc runs on cores of its
// own, so this is the rate no client of these servers can pass here; cdc's CPU per record is
// compared with the server process it keeps pace with.
//
// The snapshot counts PostgreSQL (every backend: the COPY or chunk reads, and the rest) and the
// broker; the catch-up counts the walsender that decodes the slot and the broker.
type serversLimit struct {
	// Servers names what the ceiling counts: "PostgreSQL + broker" or "walsender + broker".
	Servers string `json:"servers"`
	// ServersCPUPerMillion is their CPU seconds per 1,000,000 records.
	ServersCPUPerMillion float64 `json:"servers_cpu_seconds_per_million"`
	// Ceiling is cores ÷ the servers' CPU per record, records/s.
	Ceiling float64 `json:"ceiling_per_second"`
	Cores   int     `json:"cores"`
	// Ratio is cdc's rate over Ceiling (target >= 0.8).
	Ratio float64 `json:"ratio_cdc_to_ceiling"`
	// CDCCPUPerMillion is cdc's CPU seconds per 1,000,000 records.
	CDCCPUPerMillion float64 `json:"cdc_cpu_seconds_per_million"`
	// Versus names the CPU cdc's is compared with: "PostgreSQL + broker" (snapshot, target
	// <= 0.25) or "walsender" (catch-up, target <= 0.5); CDCOverVersus is the ratio.
	Versus        string  `json:"versus"`
	CDCOverVersus float64 `json:"ratio_cdc_cpu_to_versus_cpu"`
}

// newServersLimit computes the limit of count records that cdc moved at rate records/s for
// cdcCPU seconds of its own CPU, the servers spending serversCPU seconds, the process cdc is
// compared with versusCPU. It returns nil when a figure is missing (servers not the bench's
// own, or nothing counted).
func newServersLimit(servers, versus string, count int64, rate, cdcCPU, serversCPU, versusCPU float64, cores int) *serversLimit {
	if count <= 0 || serversCPU <= 0 || cores < 1 {
		return nil
	}
	per := 1e6 / float64(count)
	l := &serversLimit{
		Servers: servers, Versus: versus, Cores: cores,
		ServersCPUPerMillion: serversCPU * per,
		Ceiling:              float64(cores) * float64(count) / serversCPU,
		CDCCPUPerMillion:     cdcCPU * per,
		CDCOverVersus:        over(cdcCPU, versusCPU),
	}
	l.Ratio = over(rate, l.Ceiling)
	return l
}

// snapshotLimit is a snapshot run against PostgreSQL's and the broker's CPU per row.
func snapshotLimit(r snapshotRun, cores int) *serversLimit {
	servers := r.PostgresCPUSeconds + r.BrokerCPUSeconds
	return newServersLimit("PostgreSQL + broker", "PostgreSQL + broker", r.CDC.Count, r.CDC.PerSecond,
		r.CPUSeconds, servers, servers, cores)
}

// catchUpLimit is a catch-up against the walsender's and the broker's CPU per change.
func catchUpLimit(c catchUp, cores int) *serversLimit {
	if c.WalsenderCPUSeconds <= 0 {
		return nil
	}
	return newServersLimit("walsender + broker", "walsender", c.CDC.Count, c.CDC.PerSecond,
		c.CPUSeconds, c.WalsenderCPUSeconds+c.BrokerCPUSeconds, c.WalsenderCPUSeconds, cores)
}

// print writes the limit's line: label is the run ("cdc chunked"), unit what a record is.
func (l *serversLimit) print(w io.Writer, label, unit string, target float64) {
	if l == nil {
		return
	}
	fmt.Fprintf(w, "   %s: servers-only ceiling %d cores ÷ (%s %.2fs CPU per 1,000,000 %s) = %s %s/s, cdc at %.2f of it (target >= 0.80); cdc CPU %.2fs per 1,000,000 %s = %.2f × the %s's (target <= %.2f)\n",
		label, l.Cores, l.Servers, l.ServersCPUPerMillion, unit, thousands(int64(l.Ceiling)), unit, l.Ratio,
		l.CDCCPUPerMillion, unit, l.CDCOverVersus, l.Versus, target)
}

// walsenderCPU returns the CPU seconds used so far by the walsender serving slot on the
// database at dbURL, read from /proc: the server must run on this machine. ok is false when
// the slot has no active walsender or its process cannot be read.
func walsenderCPU(ctx context.Context, dbURL, slot string) (float64, bool) {
	var pid *int32
	if err := pgScalar(ctx, dbURL, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1", &pid, slot); err != nil || pid == nil {
		return 0, false
	}
	st, ok := readProcStat(int(*pid))
	if !ok {
		return 0, false
	}
	return st.self, true
}

// printLimits writes Tidemark's runs against the servers-only ceiling and its CPU per record
// against each Debezium profile's (both from process start, on the same records).
func (r *debeziumResult) printLimits(w io.Writer) {
	if len(r.Tools) == 0 {
		return
	}
	tm := r.Tools[0]
	sn := tm.Snapshot
	servers := sn.PostgresCPUSeconds + sn.BrokerCPUSeconds
	newServersLimit("PostgreSQL + broker", "PostgreSQL + broker", sn.Count, sn.PerSecond, sn.CPUSeconds, servers, servers, r.Cores).
		print(w, "Tidemark snapshot (process start -> hydrated)", "rows", 0.25)
	cu := tm.CatchUp
	if cu.WalsenderCPUSeconds > 0 {
		newServersLimit("walsender + broker", "walsender", cu.Count, cu.PerSecond, cu.CPUSeconds, cu.WalsenderCPUSeconds+cu.BrokerCPUSeconds, cu.WalsenderCPUSeconds, r.Cores).
			print(w, "Tidemark catch-up (process start -> caught up)", "changes", 0.5)
	}
	for _, d := range r.Tools[1:] {
		fmt.Fprintf(w, "   Tidemark CPU per record / %s's: snapshot %.3f (1/%.0f), catch-up %.3f (1/%.0f) (target <= 1/20 of the best profile's)\n",
			d.Name, over(sn.CPUSeconds, d.Snapshot.CPUSeconds), over(d.Snapshot.CPUSeconds, sn.CPUSeconds),
			over(cu.CPUSeconds, d.CatchUp.CPUSeconds), over(d.CatchUp.CPUSeconds, cu.CPUSeconds))
	}
}
