package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// The owner's tests: the stages are fakes that record the commands they get, and the events go
// to the owner's loop on its own goroutine, as in production (loop). Tests of one decision
// call the handlers of an owner whose loop does not run (newTestOwner).

type recorder struct {
	mu    sync.Mutex
	calls []string
	// confirmed is the last position the owner told the replication stage to confirm.
	confirmed change.LSN
	// detected and pointSet, when set, stand for a replication stage that has not applied
	// Detect or SetConsistentPoint yet: they answer when the test says.
	detected chan struct{}
	pointSet chan error
	// topicsHeld, when set, holds EnsureTopics until it is closed (a slow broker), after
	// telling topicsEntered.
	topicsHeld    chan struct{}
	topicsEntered chan []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

// take returns the calls so far and forgets them.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

type fakeRepl struct{ *recorder }

func (f fakeRepl) Resume(positions map[change.ExportID]change.LSN) {
	for _, e := range sortedExports(positions) {
		f.add("resume %s %s", e, positions[e])
	}
}
func (f fakeRepl) ResumeChunking(e change.ExportID, p change.LSN) {
	f.add("resume-chunking %s %s", e, p)
}
func (f fakeRepl) Detect(es []change.ExportID) <-chan struct{} {
	f.add("detect %v", es)
	if f.detected != nil {
		return f.detected
	}
	done := make(chan struct{})
	close(done)
	return done
}
func (f fakeRepl) SetConsistentPoint(es []change.ExportID, c change.LSN) <-chan error {
	f.add("consistent-point %v %s", es, c)
	if f.pointSet != nil {
		return f.pointSet
	}
	done := make(chan error, 1)
	done <- nil
	return done
}
func (f fakeRepl) CopyDone(e change.ExportID)              { f.add("copy-done %s", e) }
func (f fakeRepl) Remove(e change.ExportID, at change.LSN) { f.add("remove %s %s", e, at) }
func (f fakeRepl) Fail(e change.ExportID)                  { f.add("fail %s", e) }
func (f fakeRepl) Restart(e change.ExportID)               { f.add("restart %s", e) }
func (f fakeRepl) StartChunking(e change.ExportID)         { f.add("start-chunking %s", e) }
func (f fakeRepl) Confirm(lsn change.LSN) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirmed = lsn
}

type fakeChunks struct{ *recorder }

func (f fakeChunks) Add(j snapshot.ChunkJob) {
	f.add("chunk-job %s attempt %d after %v", j.Export, j.Attempt, j.ResumeAfter)
}
func (f fakeChunks) Stop(e change.ExportID) { f.add("chunk-stop %s", e) }

type fakeTopics struct{ *recorder }

func (f fakeTopics) AwaitLeaders(ctx context.Context, topics []string) {}

func (f fakeTopics) EnsureTopics(ctx context.Context, specs []sink.TopicSpec) error {
	f.mu.Lock()
	held, entered := f.topicsHeld, f.topicsEntered
	f.mu.Unlock()
	if held != nil {
		var names []string
		for _, s := range specs {
			names = append(names, s.Name)
		}
		entered <- names
		select {
		case <-held:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, s := range specs {
		f.add("topic %s compact=%v", s.Name, s.Compact)
	}
	return nil
}
func (f fakeTopics) EndOffsets(string) map[int32]int64 { return map[int32]int64{0: 0} }

// fakeCatalog: tables named "keyless..." have no key; "gone..." do not exist; "unlisted..."
// are refused (a column list without the key).
type fakeCatalog struct{ wal change.LSN }

func (c fakeCatalog) LoadTables(ctx context.Context, exports []change.ExportID) (map[change.ExportID]*change.Table, map[change.ExportID]error, error) {
	tables, errs := map[change.ExportID]*change.Table{}, map[change.ExportID]error{}
	for _, e := range exports {
		if t, err := c.loadTable(ctx, e); err != nil {
			errs[e] = err
		} else {
			tables[e] = t
		}
	}
	return tables, errs, nil
}

func (c fakeCatalog) loadTable(_ context.Context, e change.ExportID) (*change.Table, error) {
	switch {
	case strings.HasPrefix(e.Table, "gone"):
		return nil, pgcat.ErrTableNotFound
	case strings.HasPrefix(e.Table, "unlisted"):
		return nil, fmt.Errorf("load key of %s: %w: the column list leaves out the key", e, pgcat.ErrUnsupportedTable)
	case strings.HasPrefix(e.Table, "keyless"):
		return &change.Table{Export: e, Columns: []change.Column{{Name: "v"}}}, nil
	}
	return &change.Table{Export: e, Columns: []change.Column{{Name: "id", Key: true}, {Name: "v"}}}, nil
}
func (c fakeCatalog) CurrentWAL(context.Context) (change.LSN, error) { return c.wal, nil }

var (
	exA       = change.ExportID{Schema: "public", Table: "a"}
	exB       = change.ExportID{Schema: "public", Table: "b"}
	exKeyless = change.ExportID{Schema: "public", Table: "keyless"}
)

// newTestOwner returns an owner with fake stages whose tracker restored values (the watermark
// topic of an earlier life). Its loop does not run.
func newTestOwner(t testing.TB, cfg Config, tr *watermark.Tracker, values [][]byte) (*owner, *recorder) {
	t.Helper()
	if cfg.TopicPrefix == "" {
		cfg.TopicPrefix, cfg.Sink.WatermarkTopic = "p", "p.__watermarks"
	}
	if tr == nil {
		tr = watermark.NewTracker(watermark.Options{})
	}
	recs, cp, err := watermark.DecodeTopic(values)
	if err != nil {
		t.Fatal(err)
	}
	tr.Restore(recs)
	if cp != nil {
		tr.RestoreCheckpoint(cp.Position)
	}
	rec := &recorder{}
	o := newOwner(cfg, tr, slog.New(slog.DiscardHandler), newInbox(), targets{repl: fakeRepl{rec}, chunks: fakeChunks{rec}, topics: fakeTopics{rec}})
	return o, rec
}

// loop drives an owner's event loop as the stages do: every method sends the event the stage
// would send and, where the stage waits, waits for the answer.
type loop struct {
	t       testing.TB
	o       *owner
	cancel  context.CancelFunc
	done    chan error
	started bool
}

// startTestOwner returns a loop over an owner of strategy whose tracker restored values. The
// loop starts at the first event; call resume before.
func startTestOwner(t testing.TB, strategy snapshot.Strategy, values [][]byte) (*loop, *recorder) {
	t.Helper()
	return startTestOwnerCfg(t, Config{SnapshotStrategy: strategy}, nil, values)
}

func startTestOwnerCfg(t testing.TB, cfg Config, tr *watermark.Tracker, values [][]byte) (*loop, *recorder) {
	t.Helper()
	o, rec := newTestOwner(t, cfg, tr, values)
	l := &loop{t: t, o: o, done: make(chan error, 1)}
	t.Cleanup(l.stop)
	return l, rec
}

func (l *loop) start() {
	if l.started {
		return
	}
	l.started = true
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go func() { l.done <- l.o.run(ctx) }()
}

// stop ends the loop (a crash: nothing more is acknowledged) and waits for it.
func (l *loop) stop() {
	if !l.started || l.cancel == nil {
		return
	}
	l.cancel()
	l.cancel = nil
	select {
	case <-l.done:
	case <-time.After(10 * time.Second):
		l.t.Errorf("the owner's loop did not stop")
	}
}

// resume is start-up, before the loop runs.
func (l *loop) resume(ctx context.Context, cat catalog, published map[change.ExportID]struct{}, confirmed change.LSN) error {
	if l.started {
		l.t.Fatal("resume after the loop started")
	}
	return l.o.resume(ctx, cat, published, confirmed)
}

// published is one poll of the publication (no partitioned roots, no column lists).
func (l *loop) published(ctx context.Context, cat catalog, published map[change.ExportID]struct{}) error {
	l.start()
	return takeIn(ctx, l.o.inbox, cat, evPolled{published: published})
}

// request is what the snapshot stage receives next.
func (l *loop) request() snapshot.Request {
	l.t.Helper()
	l.start()
	select {
	case r := <-l.o.requests:
		return r
	case <-time.After(10 * time.Second):
		l.t.Fatal("no snapshot request")
	}
	return snapshot.Request{}
}

func (l *loop) Begin(ctx context.Context, c change.LSN, tables []snapshot.TableInfo) (map[change.ExportID]int, error) {
	l.start()
	return snapshotEvents{l.o.inbox}.Begin(ctx, c, tables)
}

// Restart and Failed report as the snapshot stage does, then wait until the owner handled it.
func (l *loop) Restart(e change.ExportID, reason string) {
	l.start()
	snapshotEvents{l.o.inbox}.Restart(e, reason)
	l.sync()
}

func (l *loop) Failed(e change.ExportID, err error) {
	l.start()
	snapshotEvents{l.o.inbox}.Failed(e, err)
	l.sync()
}

// sync returns once the owner handled every event sent before.
func (l *loop) sync() { l.phase(change.ExportID{}) }

func (l *loop) resnapshot(e change.ExportID) error {
	_, err := l.resnapshotWait(e)
	return err
}

// resnapshotWait asks for a re-copy as the HTTP endpoint does: the answer at once, and the
// channel that takes the answer once the re-copy is durable.
func (l *loop) resnapshotWait(e change.ExportID) (<-chan error, error) {
	l.start()
	ev := evResnapshot{e: e, reply: make(chan error, 1), durable: make(chan error, 1)}
	err, qerr := query(context.Background(), l.o.inbox, ev, ev.reply)
	if qerr != nil {
		l.t.Fatal(qerr)
	}
	return ev.durable, err
}

// states is what GET /exports shows once the owner handled every event sent before.
func (l *loop) states() []ExportState {
	l.start()
	reply := make(chan []ExportState, 1)
	s, err := query(context.Background(), l.o.inbox, statesReader{reply}, reply)
	if err != nil {
		l.t.Fatal(err)
	}
	return s
}

// statesReader reads what the owner publishes, on its goroutine.
type statesReader struct{ reply chan []ExportState }

func (statesReader) isEvent()        {}
func (r statesReader) read(o *owner) { r.reply <- o.states() }

// ask sends an ack as the sink does and returns the records of the reply.
func (l *loop) ask(a ack) []change.Record {
	l.t.Helper()
	l.start()
	a.reply = make(chan []change.Record, 1)
	select {
	case l.o.acks <- a:
	case <-time.After(10 * time.Second):
		l.t.Fatal("the owner does not take acks")
	}
	select {
	case r := <-a.reply:
		return r
	case <-time.After(10 * time.Second):
		l.t.Fatal("the owner does not answer")
	}
	return nil
}

// Carry, Durable and Committed are the sink's reports of one batch.
func (l *loop) Carry(units []*change.Unit) []change.Record {
	return l.ask(ack{kind: ackProduced, units: units})
}

func (l *loop) Durable(units []*change.Unit, offsets change.Offsets) []change.Record {
	l.t.Helper()
	out := l.ask(ack{kind: ackDurable, units: units, offsets: offsets})
	l.checkRecords(out)
	return out
}

// checkRecords fails unless every watermark record in recs says the state its export's phase
// gives: the tracker keeps no state of its own that could say otherwise.
func (l *loop) checkRecords(recs []change.Record) {
	l.t.Helper()
	for _, r := range recs {
		v, err := watermark.Decode(r.Value)
		if err != nil {
			continue // a checkpoint or the quiet record
		}
		if p := l.phase(v.Export); v.State != p.state() {
			l.t.Fatalf("%s is %s, whose records say %s; its record says %s", v.Export, p, p.state(), v.State)
		}
	}
}

func (l *loop) Committed() {
	l.start()
	l.o.acks <- ack{kind: ackCommitted}
	l.sync()
}

// phaseReader reads an export's phase on the owner's goroutine.
type phaseReader struct {
	e     change.ExportID
	reply chan phase
}

func (phaseReader) isEvent()        {}
func (r phaseReader) read(o *owner) { r.reply <- o.phases[r.e] }

func (l *loop) phase(e change.ExportID) phase {
	l.start()
	reply := make(chan phase, 1)
	p, err := query(context.Background(), l.o.inbox, phaseReader{e, reply}, reply)
	if err != nil {
		l.t.Fatal(err)
	}
	return p
}

// confirmed is what the owner last told the replication stage to confirm.
func (r *recorder) lastConfirmed() change.LSN {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.confirmed
}

func set(es ...change.ExportID) map[change.ExportID]struct{} {
	m := map[change.ExportID]struct{}{}
	for _, e := range es {
		m[e] = struct{}{}
	}
	return m
}

func wantCalls(t *testing.T, rec *recorder, want ...string) {
	t.Helper()
	if got := rec.take(); !slices.Equal(got, want) {
		t.Fatalf("commands:\n got %q\nwant %q", got, want)
	}
}

// wantPhase checks e's phase, and that the state its watermark records say (the tracker's)
// is the one the phase gives, whatever the phase.
func wantPhase(t *testing.T, l *loop, e change.ExportID, want phase) {
	t.Helper()
	if got := l.phase(e); got != want {
		t.Fatalf("%s is %s, want %s", e, got, want)
	}
	for _, s := range l.trackerStatus() {
		if s.Export == e && want != 0 && s.State != want.state() {
			t.Fatalf("%s is %s, whose records say %s; the tracker's say %s", e, want, want.state(), s.State)
		}
	}
}

// statusReader reads the tracker's view on the owner's goroutine.
type statusReader struct{ reply chan []watermark.ExportStatus }

func (statusReader) isEvent()        {}
func (r statusReader) read(o *owner) { r.reply <- o.tracker.Status() }

func (l *loop) trackerStatus() []watermark.ExportStatus {
	l.start()
	reply := make(chan []watermark.ExportStatus, 1)
	s, err := query(context.Background(), l.o.inbox, statusReader{reply}, reply)
	if err != nil {
		l.t.Fatal(err)
	}
	return s
}

// durable makes units durable and committed, as the sink does, and returns the records.
func durable(l *loop, units ...*change.Unit) map[change.ExportID]watermark.Record {
	out := map[change.ExportID]watermark.Record{}
	for _, r := range l.Durable(units, nil) {
		if v, err := watermark.Decode(r.Value); err == nil {
			out[v.Export] = v
		}
	}
	l.Committed()
	return out
}

// history collects every record and the last checkpoint a lifecycle made durable: what a
// restart reads back (watermark.DecodeTopic).
type history struct {
	values [][]byte
}

func (h *history) durable(l *loop, units ...*change.Unit) {
	for _, r := range l.Durable(units, nil) {
		h.values = append(h.values, r.Value)
	}
	l.Committed()
}
