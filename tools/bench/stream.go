package main

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
)

// pgbenchTables are the tables of `pgbench -i`; history gets a primary key so cdc accepts it.
var pgbenchTables = []string{"public.pgbench_accounts", "public.pgbench_branches", "public.pgbench_tellers", "public.pgbench_history"}

func (b *bench) stream(ctx context.Context) (*streamResult, error) {
	s, err := b.newScenario(ctx, scenarioStream)
	if err != nil {
		return nil, err
	}
	defer s.cleanup()
	res := &streamResult{Tables: pgbenchTables, Scale: b.o.scale}
	pgbench, conn, exports, err := s.pgbenchInit(ctx, b.o.scale)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	wctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()

	order := s.deliveryLanes(exports)
	// More exactly-once lanes catch up with a CPU profile, after the measured ones.
	var profiled []*lane
	for i := range b.o.profileRounds {
		profiled = append(profiled, s.newLane(deliveryExactlyOnce, fmt.Sprintf("prof%d", i), exports))
	}
	ab := s.abLanes(exports)
	pin := s.pinLane(exports)
	lanes := append(append(order, profiled...), ab...)
	if pin != nil {
		lanes = append(lanes, pin)
	}
	var clu []*lane
	if b.o.cluster {
		bc, run, err := b.startCluster(ctx)
		if err != nil {
			return res, err
		}
		defer bc.stop()
		res.Cluster = run
		clu = s.clusterLanes(bc, exports)
		lanes = append(lanes, clu...)
	}
	for _, l := range lanes {
		defer l.close()
		if err := l.hydrate(wctx, conn); err != nil {
			return res, err
		}
	}

	// The READ limits' slots (the Go reader's and pg_recvlogical's), before the backlog.
	readSlot, recvSlot := s.slot+"_read", s.slot+"_recv"
	startLSN, err := createReadSlots(ctx, conn, readSlot, recvSlot)
	if err != nil {
		return res, err
	}
	var pinStart change.LSN
	if pin != nil {
		if pinStart, err = createSlot(ctx, conn, s.pinnedSlot()); err != nil {
			return res, err
		}
	}

	// The backlog, written while cdc is stopped.
	backlogStart := time.Now()
	if res.BacklogTxns, err = s.pgbenchBacklog(ctx, pgbench, b.o.txns); err != nil {
		return res, err
	}
	res.BacklogSeconds = time.Since(backlogStart).Seconds()
	endLSN, err := currentLSN(ctx, conn)
	if err != nil {
		return res, err
	}
	res.BacklogWAL = int64(endLSN - startLSN)

	target, err := s.streamReadLimits(ctx, conn, res, readSlot, recvSlot, startLSN)
	if err != nil {
		return res, err
	}
	if err := s.abCatchUps(wctx, ab, target, res.Changes); err != nil {
		return res, err
	}
	eos, stats, err := s.streamCatchUps(wctx, res, order, target)
	if err != nil {
		return res, err
	}
	if res.Cluster != nil {
		if err := s.clusterCatchUps(wctx, res.Cluster, clu, target, res.Changes); err != nil {
			return res, err
		}
	}
	if pin != nil {
		if res.Pinned, err = s.pinnedCatchUp(wctx, conn, res, pin, pinStart, target); err != nil {
			return res, err
		}
	}
	if err := s.profileCatchUp(wctx, res, profiled, target); err != nil {
		b.logf("stream: CPU split: %v", err)
	}
	if err := s.streamWriteLimits(ctx, res, eos, stats); err != nil {
		return res, err
	}
	res.Ratio = ratio(res.CDC.PerSecond, res.Read.PerSecond, res.Write.PerSecond)
	res.AtLeastOnce.Ratio = ratio(res.AtLeastOnce.CDC.PerSecond, res.Read.PerSecond, res.Write.PerSecond)
	res.RatioDelivery = over(res.CDC.PerSecond, res.AtLeastOnce.CDC.PerSecond)
	res.RatioDeliveryAfterStartup = over(res.CDCAfterStartup.PerSecond, res.AtLeastOnce.CDCAfterStartup.PerSecond)
	b.logf("stream: exactly-once / at-least-once = %.2f (after start-up %.2f)", res.RatioDelivery, res.RatioDeliveryAfterStartup)
	return res, nil
}

// deliveryLanes returns one lane per delivery mode and round, each with its own slot and topics,
// in the order they catch up: A B B A A B ... (A exactly-once, B at-least-once). A run's place in
// the order changes its figure (the first catch-up is slower), and this order gives each mode
// the same places. They are hydrated before the backlog so that every slot holds all of it.
func (s *scenario) deliveryLanes(exports []change.ExportID) []*lane {
	var order []*lane
	for r := range s.b.o.deliveryRounds {
		eos := s.newLane(deliveryExactlyOnce, fmt.Sprintf("eos%d", r), exports)
		alo := s.newLane(deliveryAtLeastOnce, fmt.Sprintf("alo%d", r), exports)
		if r == 0 {
			eos = s.newLane(deliveryExactlyOnce, "", exports)
		}
		if r%2 == 0 {
			order = append(order, eos, alo)
		} else {
			order = append(order, alo, eos)
		}
	}
	return order
}

// streamReadLimits measures the READ limits of the backlog: (a) the raw pgoutput stream read by
// the Go reader, (a') the same stream read by PostgreSQL's own client to /dev/null, the server's
// side of the limit without Go's decoding. It returns the backlog's end, the catch-up's target.
func (s *scenario) streamReadLimits(ctx context.Context, conn *pgx.Conn, res *streamResult, readSlot, recvSlot string, startLSN change.LSN) (change.LSN, error) {
	b := s.b
	b.logf("stream: READ limit (pgoutput from slot %s, %s of WAL)", readSlot, mib(res.BacklogWAL))
	rd, err := readStream(ctx, s.db.url, readSlot, s.pub, startLSN, res.BacklogTxns)
	if err != nil {
		return 0, fmt.Errorf("read limit: %w", err)
	}
	if err := dropSlot(ctx, conn, readSlot); err != nil {
		return 0, err
	}
	res.Changes = rd.changes
	res.Read = newThroughput(rd.changes, rd.bytes, rd.elapsed, fmt.Sprintf("%d transactions", rd.commits))
	target := rd.lastEnd
	b.logf("stream: READ %.0f changes/s; backlog ends at %s", res.Read.PerSecond, target)

	b.logf("stream: READ limit with pg_recvlogical (slot %s)", recvSlot)
	elapsed, err := readRecvlogical(ctx, s.db.url, recvSlot, s.pub, target)
	if err != nil {
		return 0, fmt.Errorf("pg_recvlogical read limit: %w", err)
	}
	if err := dropSlot(ctx, conn, recvSlot); err != nil {
		return 0, err
	}
	rv := newThroughput(rd.changes, rd.bytes, elapsed, "pg_recvlogical -f /dev/null, proto_version 1; bytes as the Go reader counted them")
	res.ReadRecvlogical = &rv
	b.logf("stream: READ (pg_recvlogical) %.0f changes/s", rv.PerSecond)
	return target, nil
}

// streamCatchUps has (c) cdc catch up the backlog in every lane. Each mode's figures are over all
// its runs (total changes over total time); the other fields are its first run's. It returns the
// first exactly-once lane and what it wrote.
func (s *scenario) streamCatchUps(ctx context.Context, res *streamResult, order []*lane, target change.LSN) (*lane, topicStats, error) {
	var stats topicStats
	var eosRuns, aloRuns []catchUp
	var eos *lane
	for _, l := range order {
		run, st, err := l.catchUp(ctx, target, res.Changes)
		if err != nil {
			return nil, stats, err
		}
		if l.delivery == deliveryExactlyOnce {
			if eos == nil {
				eos, stats = l, st
			}
			eosRuns = append(eosRuns, run)
		} else {
			aloRuns = append(aloRuns, run)
		}
	}
	res.catchUp = combineRuns(eosRuns)
	res.catchUp.Limit = catchUpLimit(res.catchUp, runtime.NumCPU())
	aloRun := combineRuns(aloRuns)
	aloRun.Limit = catchUpLimit(aloRun, runtime.NumCPU())
	res.AtLeastOnce = &aloRun
	res.DeliveryRounds = s.b.o.deliveryRounds
	for i := range eosRuns {
		res.DeliveryRatios = append(res.DeliveryRatios, over(eosRuns[i].CDC.PerSecond, aloRuns[i].CDC.PerSecond))
	}
	return eos, stats, nil
}

// streamWriteLimits measures (b) the WRITE limit, the records cdc wrote in lane eos produced
// again, and the write ceiling (measureWrite).
func (s *scenario) streamWriteLimits(ctx context.Context, res *streamResult, eos *lane, stats topicStats) error {
	b := s.b
	dest := make(map[string]string)
	policy := make(map[string]string)
	for _, t := range eos.topics {
		dest[t] = s.prefix + ".write." + t[strings.LastIndex(t, ".")+1:]
		p, err := b.k.cleanupPolicy(ctx, t)
		if err != nil {
			return err
		}
		policy[t] = p
	}
	var err error
	if res.writeLimits, err = s.measureWrite(ctx, stats, "", dest, policy); err != nil {
		return err
	}
	readBest := res.Read.PerSecond
	if res.ReadRecvlogical != nil {
		readBest = max(readBest, res.ReadRecvlogical.PerSecond)
	}
	res.RatioCeiling = ratio(res.CDC.PerSecond, readBest, res.CeilingBest.PerSecond)
	return nil
}

// combineRuns is the first run with its throughputs taken over all runs: total changes over
// total time.
func combineRuns(runs []catchUp) catchUp {
	c := runs[0]
	var count, bytes int64
	var total, after float64
	for _, r := range runs {
		count += r.CDC.Count
		bytes += r.CDC.Bytes
		total += r.CDC.Seconds
		after += r.CDCAfterStartup.Seconds
	}
	for _, r := range runs[1:] {
		c.CPUSeconds += r.CPUSeconds
		c.PostgresCPUSeconds += r.PostgresCPUSeconds
		c.BrokerCPUSeconds += r.BrokerCPUSeconds
		c.WalsenderCPUSeconds += r.WalsenderCPUSeconds
		c.PeakRSSMiB = max(c.PeakRSSMiB, r.PeakRSSMiB)
	}
	c.CDC = newThroughput(count, bytes, time.Duration(total*float64(time.Second)), "")
	c.CDCAfterStartup = newThroughput(count, bytes, time.Duration(after*float64(time.Second)), "")
	return c
}

// Delivery modes, as CDC_DELIVERY takes them.
const (
	deliveryExactlyOnce = "exactly-once"
	deliveryAtLeastOnce = "at-least-once"
)

// lane is one cdc configuration of the stream scenario: a delivery mode with its own slot,
// topic prefix and watermark topic, on the scenario's database.
type lane struct {
	s        *scenario
	delivery string
	vars     map[string]string
	exports  []change.ExportID
	topics   []string
	start    map[string]map[int32]int64 // end offsets after hydration
	wt       *watcher
	// prof, when set, takes a CPU profile of the next catch-up.
	prof *profiler
	// bin, when set, is the cdc binary of the lane's catch-ups (-ab-bin); name says which.
	bin, name string
	// kc and brokers, when set, are the Kafka cluster the lane's cdc writes to (not the bench's
	// broker), and brokerCPU its CPU seconds so far (-cluster).
	kc        *kafkaClient
	brokers   []string
	brokerCPU func() float64
}

// kafka is the client of the Kafka cluster the lane's cdc writes to.
func (l *lane) kafka() *kafkaClient {
	if l.kc != nil {
		return l.kc
	}
	return l.s.b.k
}

// newLane returns the lane of delivery. With tag "" it uses the scenario's own slot and prefix;
// otherwise a slot and a prefix derived from them (under the scenario's prefix, so cleanup
// deletes its topics; the slot goes with the database).
func (s *scenario) newLane(delivery, tag string, exports []change.ExportID) *lane {
	slot, prefix := s.slot, s.prefix
	if tag != "" {
		slot, prefix = s.slot+"_"+tag, s.prefix+"."+tag
	}
	l := &lane{s: s, delivery: delivery, exports: exports, vars: map[string]string{
		"CDC_TABLES":       strings.Join(pgbenchTables, ","),
		"CDC_DELIVERY":     delivery,
		"CDC_SLOT":         slot,
		"CDC_TOPIC_PREFIX": prefix,
		"CDC_SPILL_DIR":    filepath.Join(s.tmp, "spill-"+slot),
	}}
	for _, e := range exports {
		l.topics = append(l.topics, change.TopicName(prefix, e))
	}
	return l
}

func (l *lane) watermarkTopic() string { return l.vars["CDC_TOPIC_PREFIX"] + ".__watermarks" }

// hydrate runs cdc until every table is hydrated and the watermarks reach the present, stops
// it, and records the topics' end offsets.
func (l *lane) hydrate(ctx context.Context, conn *pgx.Conn) error {
	b := l.s.b
	b.logf("stream: %s cdc run (slot %s) hydrates %s", l.delivery, l.vars["CDC_SLOT"], strings.Join(pgbenchTables, ", "))
	p, err := l.s.startCDC(l.vars)
	if err != nil {
		return err
	}
	defer p.stop(time.Minute)
	brokers := b.svc.brokers
	if l.brokers != nil {
		brokers = l.brokers
	}
	if l.wt, err = b.watchCDCOn(ctx, l.kafka(), brokers, p, l.watermarkTopic()); err != nil {
		return err
	}
	if _, err := l.wt.until(ctx, "hydration", allHydrated(0, l.exports...), p.check); err != nil {
		return err
	}
	now, err := currentLSN(ctx, conn)
	if err != nil {
		return err
	}
	if _, err := l.wt.until(ctx, "watermarks >= "+now.String(), allHydrated(now, l.exports...), p.check); err != nil {
		return err
	}
	if err := p.stop(time.Minute); err != nil {
		return err
	}
	l.start, err = l.kafka().endOffsets(ctx, l.topics...)
	return err
}

func (l *lane) close() {
	if l.wt != nil {
		l.wt.close()
	}
}

// catchUp restarts cdc, waits until every watermark reaches target, stops cdc and reads back
// what it wrote; changes is the READ limit's count of the backlog.
func (l *lane) catchUp(ctx context.Context, target change.LSN, changes int64) (catchUp, topicStats, error) {
	b := l.s.b
	res := catchUp{Delivery: l.delivery}
	b.logf("stream: %s cdc restarts and catches up to %s", l.delivery, target)
	vars := l.vars
	if l.prof != nil {
		vars = maps.Clone(l.vars)
		maps.Copy(vars, l.prof.vars())
	}
	bin := l.s.b.bin
	if l.bin != "" {
		bin = l.bin
	}
	p, err := l.s.startCDCBin(bin, vars)
	if err != nil {
		return res, topicStats{}, err
	}
	defer p.stop(time.Minute)
	cpuBefore := b.svc.cpu.sample()
	var brokerBefore float64
	if l.brokerCPU != nil {
		brokerBefore = l.brokerCPU()
	}
	if l.prof != nil {
		l.prof.start(ctx, p)
	}
	doneAt, err := l.wt.until(ctx, "watermarks >= "+target.String(), allHydrated(target, l.exports...), p.check)
	if err != nil {
		return res, topicStats{}, err
	}
	res.PostgresCPUSeconds, res.BrokerCPUSeconds, _ = b.svc.cpu.sample().since(cpuBefore)
	if l.brokerCPU != nil {
		res.BrokerCPUSeconds = l.brokerCPU() - brokerBefore
	}
	if ws, ok := walsenderCPU(ctx, l.s.db.url, l.vars["CDC_SLOT"]); ok {
		res.WalsenderCPUSeconds = ws
	} else {
		b.logf("stream: WARNING: the walsender of slot %s could not be read from /proc; no servers-only ceiling", l.vars["CDC_SLOT"])
	}
	if l.prof != nil {
		// The profile's window may outlast the catch-up by a little; cdc idles meanwhile.
		if _, err := l.prof.wait(ctx); err != nil {
			return res, topicStats{}, err
		}
	}
	replStart, ok := p.logTime("starting replication")
	if !ok {
		replStart, ok = p.logTime("pipeline running")
	}
	if !ok {
		b.logf("stream: WARNING: no \"starting replication\" line in %s; start-up time unknown", p.logPath)
		replStart = p.started
	}
	if err := p.stop(time.Minute); err != nil {
		return res, topicStats{}, err
	}
	res.CPUSeconds, res.PeakRSSMiB = p.usage()
	stats, err := l.kafka().readBack(ctx, l.topics, l.start, 20_000)
	if err != nil {
		return res, stats, err
	}
	if stats.Records != changes {
		b.logf("stream: WARNING: %s cdc wrote %d records for %d changes", l.delivery, stats.Records, changes)
	}
	res.StartupSeconds = replStart.Sub(p.started).Seconds()
	res.CDC = newThroughput(changes, stats.bytes(), doneAt.Sub(p.started), "")
	res.CDCAfterStartup = newThroughput(changes, stats.bytes(), doneAt.Sub(replStart), "")
	res.CDCRecords, res.CDCTxns, res.CDCPerTxn = stats.Records, stats.Transactions, stats.recordsPerTxn()
	b.logf("stream: %s cdc %.0f changes/s (start-up %.2fs)", l.delivery, res.CDC.PerSecond, res.StartupSeconds)
	return res, stats, nil
}

// abLanes are the exactly-once lanes of -ab-bin: per round one with the repository's cdc (A)
// and one with the other binary (B), in the order A B B A A B ...
func (s *scenario) abLanes(exports []change.ExportID) []*lane {
	if s.b.o.abBin == "" {
		return nil
	}
	var ls []*lane
	for r := range s.b.o.abRounds {
		a := s.newLane(deliveryExactlyOnce, fmt.Sprintf("aba%d", r), exports)
		b := s.newLane(deliveryExactlyOnce, fmt.Sprintf("abb%d", r), exports)
		a.name, b.name, b.bin = "A", "B", s.b.o.abBin
		if r%2 == 0 {
			ls = append(ls, a, b)
		} else {
			ls = append(ls, b, a)
		}
	}
	return ls
}

// abCatchUps runs the -ab-bin lanes and logs each run's cdc and walsender CPU per 1,000,000
// changes, and the medians per binary.
func (s *scenario) abCatchUps(ctx context.Context, lanes []*lane, target change.LSN, changes int64) error {
	per := make(map[string][][2]float64)
	for _, l := range lanes {
		run, _, err := l.catchUp(ctx, target, changes)
		if err != nil {
			return err
		}
		cdc, ws := run.CPUSeconds/float64(changes)*1e6, run.WalsenderCPUSeconds/float64(changes)*1e6
		per[l.name] = append(per[l.name], [2]float64{cdc, ws})
		s.b.logf("stream: A/B %s: cdc %.2fs, walsender %.2fs CPU per 1,000,000 changes, ratio %.2f, %.0f changes/s",
			l.name, cdc, ws, cdc/max(ws, 1e-9), run.CDC.PerSecond)
	}
	for _, name := range []string{"A", "B"} {
		var cdc, ws, ratio []float64
		for _, v := range per[name] {
			cdc, ws, ratio = append(cdc, v[0]), append(ws, v[1]), append(ratio, v[0]/max(v[1], 1e-9))
		}
		s.b.logf("stream: A/B %s medians of %d: cdc %.2fs, walsender %.2fs CPU per 1,000,000 changes, ratio %.2f (runs: cdc %s; ratio %s)",
			name, len(cdc), median(cdc), median(ws), median(ratio), formatFloats(cdc), formatFloats(ratio))
	}
	return nil
}

func formatFloats(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(parts, " / ")
}
