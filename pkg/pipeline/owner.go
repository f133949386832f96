package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidemark/cdc/internal/burst"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// The owner is one goroutine that owns every export's life: its phase, the watermark tracker
// and everything decided from them. It takes typed events on channels and sends typed commands
// to the stages; no other goroutine reads or writes its state, so it takes no lock.
//
// Events, each from one sender:
//
//	evPolled        poller        the publication, its partitioned roots, column lists and
//	                              filters, the server's WAL position (reply: tables to load, or
//	                              the poll's outcome)
//	evLoaded        poller        the schemas of the tables a poll adds (reply: the outcome)
//	evTopics        topic admin   topics made (or not) for a poll or a snapshot
//	evBegin         snapshot      a snapshot began at its consistent point (reply: attempts)
//	evRestart       snapshot      a copy must start over (table rewritten, request failed)
//	evFailed        snapshot,     a permanent error of one export
//	                chunker,
//	                reconciler
//	evReconciled    reconciler    rows of earlier attempts are deleted: release the hold
//	evResnapshot    HTTP          an operator asks for a re-copy (reply: error; then nil once
//	                              the record announcing it is durable: recopy.go)
//	ack             sink          units produced, durable, committed (reply: records to write;
//	                (ackPort)     the sink calls its sink.Acker, which sends these)
//	replication.Fact replication  a relation of a table that is not exported
//
// Commands go to the replication stage (replicationControl: route, hold, release, remove,
// fail, confirm), the chunker (chunkControl: copy, stop), the snapshot stage (a Request on its
// channel), the reconciler (a job on its channel), the poller (wake) and Kafka's topics
// (topicControl, through the topic administrator: a goroutine of run's that makes topics
// beside the loop and answers with evTopics). Nothing in the loop waits on I/O: the catalog is
// read by the poller, topics are made beside it, and the sink's acknowledgements are served
// before any other event. What GET /exports shows is published as an immutable copy (view) after
// every change, so that reading it never waits for the loop.
type owner struct {
	tracker *watermark.Tracker
	phases  map[change.ExportID]phase
	// failures is the class of each failed export's error (failureClass), where it is known.
	failures map[change.ExportID]string
	// pending: exports to copy again at the next poll (a restarted copy, a re-copy on demand).
	pending []change.ExportID
	// recopies: re-copies on demand waiting for the record that announces them; recopyFlight:
	// the replies of those whose record is in the batch not yet committed (recopy.go).
	recopies     map[change.ExportID]*recopyWait
	recopyFlight []chan<- error
	// startLSN is the slot's confirmed position at start-up: confirmable until the tracker
	// knows better.
	startLSN change.LSN
	// origin is the timeline this life reads, named in every checkpoint (promotion.go).
	origin watermark.Origin

	cfg Config
	log *slog.Logger
	// copyStarted logs "chunked copy started" one by one while few copies start at once.
	copyStarted *burst.Logger
	topic       func(change.ExportID) string
	// The stages the owner commands, given at construction (targets), and its channels (the
	// inbox the stages were built with).
	targets
	*inbox
	// view is the exports' states as of the last event that could change them.
	view atomic.Pointer[[]ExportState]
	// stuckPoll is why the last poll's tables could not be taken in (their catalog, their
	// topics), and since when; nil once a poll went through. stuckBegin is the same for the
	// last snapshot's tables (their topics, at the consistent point); nil once a snapshot
	// began, or none of its tables waits any more (Pipeline.Ready).
	stuckPoll, stuckBegin atomic.Pointer[admission]

	// round is the poll being taken in (pollRound), nil between polls; pollSeq numbers them.
	round   *pollRound
	pollSeq uint64
	// chunking counts the exports in phaseChunking; backlog holds the exports whose topics
	// are made and whose chunked copy waits for room (chunkWindow), in order.
	chunking int
	backlog  []queuedChunk
	// Queues of commands whose receivers may be busy: the owner never waits for them. topicQ
	// goes to the topic administrator, requestQ to the snapshot stage, reconcileQ to the
	// reconciler (the inbox's channels).
	topicQ     []topicJob
	requestQ   []snapshot.Request
	reconcileQ []snapshot.ReconcileJob
	// Commands the replication stage applies in order: detecting waits for Detect before the
	// snapshot is requested, beginning for SetConsistentPoint before a Begin is answered.
	detecting    []detectWait
	beginning    []beginWait
	lastConfirm  change.LSN
	hasConfirmed bool

	// copied: exports whose copy became durable in the batch not yet committed.
	copied []change.ExportID
	// leaves: per published partitioned table (publish_via_partition_root), its leaf
	// partitions as last acted on (partitions). reconcileNext: exports whose next copy must
	// reconcile their topic, so it takes the copy strategy.
	leaves        map[change.ExportID]string
	reconcileNext map[change.ExportID]bool
	// definitions: per export, the publication's column list and row filter its current copy
	// read (publication.go).
	definitions map[change.ExportID]*watermark.PublishedInfo
	// partial is the transaction published in pieces whose last piece is not durable yet, as
	// far as the durable units tell (restored from the checkpoint at start). While it is set no
	// watermark record is written: a consumer reading a topic up to a watermark's offsets never
	// sees part of a transaction.
	partial *change.Partial
}

// The owner drives the stages through these commands; the production values are the stages
// themselves, the unit tests give fakes. None of them calls back into the owner.
type (
	replicationControl interface {
		Resume(positions map[change.ExportID]change.LSN)
		ResumeChunking(e change.ExportID, position change.LSN)
		Detect(exports []change.ExportID) <-chan struct{}
		SetConsistentPoint(exports []change.ExportID, c change.LSN) <-chan error
		CopyDone(e change.ExportID)
		Remove(e change.ExportID, at change.LSN)
		Fail(e change.ExportID)
		Restart(e change.ExportID)
		StartChunking(e change.ExportID)
		Confirm(lsn change.LSN)
	}
	chunkControl interface {
		Add(job snapshot.ChunkJob)
		Stop(e change.ExportID)
	}
	topicControl interface {
		EnsureTopics(ctx context.Context, specs []sink.TopicSpec) error
		AwaitLeaders(ctx context.Context, topics []string)
		EndOffsets(topic string) map[int32]int64
	}
	// catalog reads tables' schemas, all in one go, and the server's WAL position: at start-up
	// (resume), and on the poller's connection for a poll (takeIn), never in the owner's loop.
	// A table that cannot be loaded has its error in errs; err is for the read as a whole.
	catalog interface {
		LoadTables(ctx context.Context, exports []change.ExportID) (tables map[change.ExportID]*change.Table, errs map[change.ExportID]error, err error)
		CurrentWAL(ctx context.Context) (change.LSN, error)
	}
)

// targets are the stages the owner commands, and the facts the replication stage reports.
type targets struct {
	repl   replicationControl
	chunks chunkControl
	topics topicControl
	facts  <-chan replication.Fact
}

// inbox holds the owner's channels: the events and acks it serves, the poller's wake-up, the
// queues its commands leave by, and its stop signal. It is made before the stages, which hold
// it instead of the owner; the owner, made last, is given the stages at construction.
type inbox struct {
	events  chan event
	acks    chan ack
	stopped chan struct{}
	// wake asks the poller to poll now; requests go to the snapshot stage, reconciles to the
	// reconciler, topicJobs to the topic administrator.
	wake       chan struct{}
	requests   chan snapshot.Request
	reconciles chan snapshot.ReconcileJob
	topicJobs  chan topicJob
}

func newInbox() *inbox {
	return &inbox{
		events:     make(chan event, 64),
		acks:       make(chan ack),
		stopped:    make(chan struct{}),
		wake:       make(chan struct{}, 1),
		requests:   make(chan snapshot.Request),
		reconciles: make(chan snapshot.ReconcileJob),
		topicJobs:  make(chan topicJob),
	}
}

var (
	_ replicationControl = (*replication.Stage)(nil)
	_ chunkControl       = (*snapshot.Chunker)(nil)
	_ topicControl       = (*sink.Sink)(nil)
)

// Events (see owner).
type (
	event interface{ isEvent() }

	evPolled struct {
		published map[change.ExportID]struct{}
		leaves    map[change.ExportID]string
		defs      map[change.ExportID]change.PublishedAs
		// wal is the server's WAL position, read after the publication: the point a table that
		// left it is removed at.
		wal change.LSN
		// reply (capacity 1) takes the tables to load (then evLoaded), or the poll's outcome.
		reply chan pollReply
	}
	evLoaded struct {
		// tables: the schemas loaded, by export; one that could not be loaded is absent.
		tables map[change.ExportID]*change.Table
		// err: the tables could not be read at all; the poll fails.
		err   error
		reply chan pollReply
	}
	evTopics struct {
		job topicJob
		err error
	}
	evBegin struct {
		c      change.LSN
		tables []snapshot.TableInfo
		reply  chan beginReply
	}
	evRestart struct {
		e      change.ExportID
		reason string
	}
	evFailed struct {
		e   change.ExportID
		err error
	}
	evReconciled struct{ e change.ExportID }
	evResnapshot struct {
		e change.ExportID
		// reply takes the answer at once (nil: accepted); durable then takes nil once the
		// record announcing the copy is durable, or why the copy will not start. Both have
		// capacity 1.
		reply   chan error
		durable chan error
	}
)

type (
	detectWait struct {
		applied <-chan struct{}
		req     snapshot.Request
	}
	beginWait struct {
		set <-chan error
		ev  evBegin
	}
)

type pollReply struct {
	// load: the tables the owner asks for (send evLoaded); nil: err is the poll's outcome.
	load []change.ExportID
	err  error
}

// topicJob is topics to make, and what the owner does with the outcome.
type topicJob struct {
	specs []sink.TopicSpec
	then  func(error)
}

type beginReply struct {
	attempts map[change.ExportID]int
	err      error
}

func (evPolled) isEvent()     {}
func (evLoaded) isEvent()     {}
func (evTopics) isEvent()     {}
func (evBegin) isEvent()      {}
func (evRestart) isEvent()    {}
func (evFailed) isEvent()     {}
func (evReconciled) isEvent() {}
func (evResnapshot) isEvent() {}

// newOwner returns an owner of the exports' lives, served on in, that commands t; tracker is
// told its phases from now on.
func newOwner(cfg Config, tracker *watermark.Tracker, log *slog.Logger, in *inbox, t targets) *owner {
	o := &owner{
		cfg: cfg, tracker: tracker, log: log, inbox: in, targets: t,
		copyStarted:   burst.New(log, "chunked copy started", "chunked copies started"),
		phases:        make(map[change.ExportID]phase),
		failures:      make(map[change.ExportID]string),
		topic:         func(e change.ExportID) string { return change.TopicName(cfg.TopicPrefix, e) },
		leaves:        make(map[change.ExportID]string),
		reconcileNext: make(map[change.ExportID]bool),
		recopies:      make(map[change.ExportID]*recopyWait),
		definitions:   make(map[change.ExportID]*watermark.PublishedInfo),
	}
	return o
}

// run serves events until ctx ends, and returns ctx's error. It never waits on I/O, nor for a
// stage that may wait for it: commands are queued (requests, reconcile jobs, topics to make) or
// posted (the replication stage's, whose outcome it selects on); the catalog is read by the
// poller. The sink's acknowledgements come first: a pending one is served before any other
// event. Afterwards drain serves the sink alone until it has stopped.
func (o *owner) run(ctx context.Context) error {
	admin := make(chan struct{})
	go func() {
		defer close(admin)
		o.administer(ctx)
	}()
	defer func() { <-admin }()
	defer close(o.stopped)
	o.confirm()
	o.publishView()
	for {
		select {
		case a := <-o.acks:
			o.served(a)
			continue
		default:
		}
		if err := o.serve(ctx); err != nil {
			return err
		}
	}
}

// serve waits for the next thing to do, and does it: an event, an ack, a fact, a queued command
// taken, a replication command applied. It returns ctx's error once ctx ends.
func (o *owner) serve(ctx context.Context) error {
	var out outbound
	o.outbound(&out)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case a := <-o.acks:
		o.served(a)
		return nil
	case ev := <-o.events:
		o.handle(ev)
		o.publishView()
	case f := <-o.facts:
		if f.Kind == replication.FactUnknownRelation {
			o.log.Debug("relation message for a table that is not exported", "export", f.Export.String())
			o.wakePoll()
		}
	case out.requests <- out.req:
		o.requestQ = o.requestQ[1:]
	case out.reconciles <- out.job:
		o.reconcileQ = o.reconcileQ[1:]
	case out.topicJobs <- out.topics:
		o.topicQ = o.topicQ[1:]
	case <-out.detected:
		w := o.detecting[0]
		o.detecting = o.detecting[1:]
		o.log.Info("hydrating tables", "exports", fmt.Sprint(w.req.Exports))
		o.requestQ = append(o.requestQ, w.req)
	case err := <-out.pointSet:
		w := o.beginning[0]
		o.beginning = o.beginning[1:]
		var attempts map[change.ExportID]int
		if err == nil {
			attempts = o.begun(w.ev.c, w.ev.tables)
		}
		w.ev.reply <- beginReply{attempts, err}
		o.publishView()
	}
	o.startQueued()
	o.confirm()
	return nil
}

// outbound is what the loop may do next besides taking events: the head of each command queue
// and the channel it leaves by, and the replication commands whose outcome it waits for. A nil
// channel (an empty queue) is never ready.
type outbound struct {
	requests   chan<- snapshot.Request
	req        snapshot.Request
	reconciles chan<- snapshot.ReconcileJob
	job        snapshot.ReconcileJob
	topicJobs  chan<- topicJob
	topics     topicJob
	detected   <-chan struct{}
	pointSet   <-chan error
}

func (o *owner) outbound(out *outbound) {
	if len(o.requestQ) > 0 {
		out.requests, out.req = o.requests, o.requestQ[0]
	}
	if len(o.reconcileQ) > 0 {
		out.reconciles, out.job = o.reconciles, o.reconcileQ[0]
	}
	if len(o.topicQ) > 0 {
		out.topicJobs, out.topics = o.topicJobs, o.topicQ[0]
	}
	if len(o.detecting) > 0 {
		out.detected = o.detecting[0].applied
	}
	if len(o.beginning) > 0 {
		out.pointSet = o.beginning[0].set
	}
}

// served handles an ack in the loop.
func (o *owner) served(a ack) {
	o.ack(a)
	if a.kind == ackCommitted {
		// Copies that ended make room for queued ones (startQueued).
		o.startQueued()
		o.publishView()
	}
	o.confirm()
}

// administer is the topic administrator: it makes the topics of each job in turn, beside the
// loop (creating a topic and waiting for its metadata may take a minute), and hands each job to
// a waiter that waits for its new topics' leaders, job after job, beside the next jobs'
// creation, and hands each outcome back as evTopics. It ends with ctx, once its waits have.
func (o *owner) administer(ctx context.Context) {
	// One waiter, in job order: the broker makes partitions in the order their topics were
	// created, so a job's leaders answer after the previous job's, and its wait (at most
	// topicMetadataWait) starts when that one's ended. 20 jobs of 500 topics made within
	// seconds would otherwise each poll the broker at once, and the last would run out of
	// time while the broker still made the first ones' partitions.
	waits := make(chan func(), 64)
	var waiter sync.WaitGroup
	waiter.Go(func() {
		for wait := range waits {
			if ctx.Err() == nil { // stopping: the waits queued behind are dropped, not logged as timed out
				wait()
			}
		}
	})
	defer func() {
		close(waits)
		waiter.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case j := <-o.topicJobs:
			err := o.topics.EnsureTopics(ctx, j.specs)
			var refused sink.TopicErrors
			if err != nil && !errors.As(err, &refused) {
				select {
				case o.events <- evTopics{job: j, err: err}:
				case <-ctx.Done():
					return
				}
				continue
			}
			// AwaitLeaders waits only for topics EnsureTopics created (not those it refused).
			names := make([]string, len(j.specs))
			for i, spec := range j.specs {
				names[i] = spec.Name
			}
			wait := func() {
				o.topics.AwaitLeaders(ctx, names)
				select {
				case o.events <- evTopics{job: j, err: err}:
				case <-ctx.Done():
				}
			}
			select {
			case waits <- wait:
			case <-ctx.Done():
				return
			}
		}
	}
}

// drain answers the sink's acks, after run returned, until sinkDone or stop is closed: the
// sink drains what the stages handed it, and its watermarks are still due.
func (o *owner) drain(sinkDone, stop <-chan struct{}) {
	for {
		select {
		case a := <-o.acks:
			o.ack(a)
			o.confirm()
		case <-sinkDone:
			return
		case <-stop:
			return
		}
	}
}

func (o *owner) handle(ev event) {
	switch ev := ev.(type) {
	case evPolled:
		o.polled(ev)
	case evLoaded:
		o.loaded(ev)
	case evTopics:
		ev.job.then(ev.err)
	case evBegin:
		o.begin(ev)
	case evRestart:
		o.restart(ev.e, ev.reason)
	case evFailed:
		o.failed(ev.e, ev.err)
	case evReconciled:
		o.repl.CopyDone(ev.e)
	case evResnapshot:
		ev.reply <- o.resnapshot(ev.e, ev.durable)
	default:
		// Tests read the owner's state on its goroutine with events of their own.
		if r, ok := ev.(interface{ read(*owner) }); ok {
			r.read(o)
		}
	}
}

// ack handles a report of the sink.
func (o *owner) ack(a ack) {
	switch a.kind {
	case ackProduced:
		a.reply <- o.carry(a.units)
	case ackDurable:
		a.reply <- o.durable(a.units, a.offsets)
	case ackCommitted:
		o.committed()
	}
}

// publishView publishes the exports' states for readers on other goroutines (exports).
func (o *owner) publishView() {
	v := o.states()
	o.view.Store(&v)
}

// exports returns the exports' states as of the last event that could change them: from any
// goroutine, without waiting for the loop.
func (o *owner) exports() []ExportState {
	if v := o.view.Load(); v != nil {
		return *v
	}
	return nil
}

// confirm tells the replication stage what the slot may confirm, when it changed.
func (o *owner) confirm() {
	if lsn, ok := o.confirmable(); ok && (!o.hasConfirmed || lsn != o.lastConfirm) {
		o.lastConfirm, o.hasConfirmed = lsn, true
		o.repl.Confirm(lsn)
	}
}

// confirmable is what the slot may confirm.
func (o *owner) confirmable() (change.LSN, bool) {
	if lsn, ok := o.tracker.Confirmable(); ok {
		return max(lsn, o.startLSN), true
	}
	return o.startLSN, o.startLSN != 0
}

// wakePoll asks the poller to look at the publication now.
func (in *inbox) wakePoll() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// errStopped: the owner's life ended while an event waited for its answer.
var errStopped = errors.New("the pipeline stopped")

// send hands ev to the owner; false when it stopped (or ctx ended) first.
func (in *inbox) send(ctx context.Context, ev event) bool {
	select {
	case in.events <- ev:
		return true
	case <-in.stopped:
	case <-ctx.Done():
	}
	return false
}

// query sends an event that has a reply and waits for the reply.
func query[T any](ctx context.Context, in *inbox, ev event, reply chan T) (T, error) {
	var zero T
	if !in.send(ctx, ev) {
		return zero, errStopped
	}
	select {
	case v := <-reply:
		return v, nil
	case <-in.stopped:
		return zero, errStopped
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// snapshotEvents turns the snapshot stage's and the chunker's reports into the owner's events
// (snapshot.Hooks, the Failed of snapshot.ChunkHooks).
type snapshotEvents struct{ in *inbox }

var (
	_ snapshot.Hooks          = snapshotEvents{}
	_ snapshot.ReconcileHooks = snapshotEvents{}
)

func (s snapshotEvents) Begin(ctx context.Context, c change.LSN, tables []snapshot.TableInfo) (map[change.ExportID]int, error) {
	reply := make(chan beginReply, 1)
	r, err := query(ctx, s.in, evBegin{c: c, tables: tables, reply: reply}, reply)
	if err != nil {
		return nil, err
	}
	return r.attempts, r.err
}

func (s snapshotEvents) Restart(e change.ExportID, reason string) {
	s.in.send(context.Background(), evRestart{e: e, reason: reason})
}

// Reconciled (snapshot.ReconcileHooks): the deletes of e's reconcile are handed over.
func (s snapshotEvents) Reconciled(e change.ExportID) {
	s.in.send(context.Background(), evReconciled{e: e})
}

func (s snapshotEvents) Failed(e change.ExportID, err error) {
	s.in.send(context.Background(), evFailed{e: e, err: err})
}

// chunkWiring connects the chunker with the replication stage directly: its windows and chunks
// go to the stage, which merges them with the stream; only a failure goes to the owner.
type chunkWiring struct {
	repl *replication.Stage
	snapshotEvents
}

var _ snapshot.ChunkHooks = chunkWiring{}

func (w chunkWiring) OpenWindow(id uint64, e change.ExportID, seq int) { w.repl.OpenWindow(id, e, seq) }
func (w chunkWiring) ChunkRead(id uint64, u *change.Unit)              { w.repl.ChunkRead(id, u) }
func (w chunkWiring) AbandonWindow(id uint64)                          { w.repl.AbandonWindow(id) }
func (w chunkWiring) CopyComplete(e change.ExportID, total int)        { w.repl.CopyComplete(e, total) }
func (w chunkWiring) Streamed(ctx context.Context, from uint32) ([]uint32, error) {
	return w.repl.Streamed(ctx, from)
}

// admission is a taking-in of tables (a poll's, a snapshot's) that failed.
type admission struct {
	err     error
	exports []change.ExportID // the tables that wait
	since   time.Time
	retries int
}

// admitted records how taking tables in went: an error keeps the pipeline from being ready
// (the tables wait), until one of the same kind goes through.
func (o *owner) admitted(slot *atomic.Pointer[admission], err error, waiting []change.ExportID) {
	if err == nil {
		slot.Store(nil)
		return
	}
	a := &admission{err: err, exports: waiting, since: time.Now()}
	if prev := slot.Load(); prev != nil {
		a.since, a.retries = prev.since, prev.retries+1
	}
	slot.Store(a)
}

// anyHolding reports whether one of exports still waits for its snapshot to begin.
func (o *owner) anyHolding(exports []change.ExportID) bool {
	for _, e := range exports {
		if p := o.phases[e]; p == phaseHolding {
			return true
		}
	}
	return false
}
