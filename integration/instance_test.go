package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/watermark"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// waitLog waits until p's log contains s.
func waitLog(t testing.TB, p *proc, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !containsLog(p, s) {
		if done, err := p.exited(); done {
			t.Fatalf("cdc exited (%v) before logging %q; log:\n%s", err, s, tail(p.log.String(), 6000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("cdc did not log %q within %s; log:\n%s", s, timeout, tail(p.log.String(), 6000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSecondInstanceIsStandby: a second instance on the same slot waits, fences nothing, and
// takes over when the first one dies; the topics end up equal to the tables, each change once.
func TestSecondInstanceIsStandby(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const bigRows = 20_000
	e.createTables(bigRows)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.big,public.small_a,public.small_b"

	first := e.startCDC(vars)
	e.waitFor(first, 3*time.Minute, 1, allTables...)
	w := e.startWriter(ctx, bigRows)

	second := e.startCDC(vars)
	waitLog(t, second, "waiting as a standby", time.Minute)
	if !containsLog(second, "tidemark-replication") {
		t.Errorf("the standby does not say which process holds the slot:\n%s", tail(second.log.String(), 3000))
	}
	// The first keeps publishing while the second waits: it was not fenced.
	lsn := e.currentLSN(ctx)
	e.waitFor(first, time.Minute, lsn, allTables...)
	if done, err := first.exited(); done {
		t.Fatalf("the first instance exited (%v) while a standby waited:\n%s", err, tail(first.log.String(), 4000))
	}

	first.stop(syscall.SIGKILL)
	waitLog(t, second, "taking over", time.Minute)
	n := w.finish(t)
	lsn = e.currentLSN(ctx)
	e.waitFor(second, 2*time.Minute, lsn, allTables...)
	t.Logf("%d transactions across the take-over", n)
	e.assertTopicsEqualTables(allTables...)
	e.checkNoDuplicates(allTables...)
}

// TestFencedInstanceStops: when another instance takes over the transactional id and the slot,
// the fenced instance stops with a message naming the process that holds the slot. Fenced
// without anyone on the slot (what a transaction aborted by its timeout looks like), it restarts
// and goes on.
func TestFencedInstanceStops(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createTables(1000)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.big,public.small_a,public.small_b"
	p := e.startCDC(vars)
	e.waitFor(p, 3*time.Minute, 1, allTables...)

	var db string
	if err := e.conn().QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	fence := func() {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.TransactionalID("tidemark-"+db+"-"+e.slot))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if _, _, err := cl.ProducerID(ctx); err != nil {
			t.Fatalf("fence: %v", err)
		}
	}

	// 1. Fenced, nobody else on the slot: it restarts and keeps publishing.
	w := e.startWriter(ctx, 1000)
	fence()
	waitLog(t, p, "no other instance holds the slot", 2*time.Minute)
	n := w.finish(t)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), allTables...)
	t.Logf("%d transactions across a fence without a rival", n)
	e.assertTopicsEqualTables(allTables...)
	e.checkNoDuplicates(allTables...)

	// 2. Fenced, and a rival streams from the slot as soon as it is free: it stops, saying who.
	rivalCtx, stopRival := context.WithCancel(ctx)
	defer stopRival()
	rival := make(chan error, 1)
	go func() { rival <- holdSlot(rivalCtx, e.pgURL, e.slot) }()
	w = e.startWriter(ctx, 1000)
	fence()
	code := waitExit(t, p, 2*time.Minute)
	w.finish(t)
	if code == 0 {
		t.Errorf("fenced instance exited with code 0")
	}
	out := p.log.String()
	if !strings.Contains(out, "another instance took over") || !strings.Contains(out, "pid") {
		t.Errorf("fenced instance's last words do not say who took over:\n%s", tail(out, 3000))
	}
	stopRival()
	if err := <-rival; err != nil {
		t.Fatalf("rival: %v", err)
	}
}

// holdSlot streams from slot as soon as it is free, until ctx ends.
func holdSlot(ctx context.Context, url, slot string) error {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "rival-instance"
	for ctx.Err() == nil {
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '1'", "publication_names 'it_pub'"}})
		if err == nil {
			<-ctx.Done()
			conn.Close(context.Background())
			return nil
		}
		conn.Close(context.Background())
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// TestReplicationCutKeepsCopy cuts the replication connection (the walsender is terminated)
// several times while a table added to the running pipeline is copied: the replication stage
// reconnects alone, the copy goes on (its first attempt hydrates the table), and every change
// arrives once.
func TestReplicationCutKeepsCopy(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	a := e.startAddedCopy(400_000, "chunked")
	rec, p := a.rec, a.p
	c := e.conn()
	cuts := 0
	for range 3 {
		time.Sleep(700 * time.Millisecond)
		var n int
		if err := c.QueryRow(ctx, `SELECT count(pg_terminate_backend(active_pid)) FROM pg_replication_slots WHERE slot_name = $1 AND active`, e.slot).Scan(&n); err != nil {
			t.Fatal(err)
		}
		cuts += n
	}
	if cuts == 0 {
		t.Fatal("no replication connection was cut")
	}
	if latest := e.latestWatermarks(); latest[bigID].State != watermark.StateHydrating {
		t.Fatalf("big was %s after the cuts; they must come during its copy (raise bigRows)", latest[bigID].State)
	}
	hyd := rec.first(t, 5*time.Minute, bigID, "hydrated", func(r watermark.Record) bool { return r.State == watermark.StateHydrated })
	if hyd.Snapshot == nil || hyd.Snapshot.Attempt != 1 {
		t.Errorf("big hydrated on attempt %+v after %d replication cuts; want its first copy kept", hyd.Snapshot, cuts)
	}
	a.stopWriter()
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.small_a", "public.small_b", "public.big")
	if n := strings.Count(p.log.String(), "replication connection lost; reconnecting"); n == 0 {
		t.Errorf("no reconnect logged after %d cuts", cuts)
	}
	if strings.Contains(p.log.String(), "pipeline failed; restarting") {
		t.Errorf("a replication cut restarted the whole pipeline")
	}
	t.Logf("%d replication cuts during the copy", cuts)
	e.assertTopicsEqualTables("public.small_a", "public.small_b", "public.big")
	e.checkNoDuplicates("public.small_a", "public.small_b", "public.big")
}
