package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format/formats"
	"github.com/tidemark/cdc/pkg/kafkaconn"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// Config configures a Reader. Brokers and WatermarkTopic are required.
type Config struct {
	Brokers []string
	// WatermarkTopic is cdc's watermark topic, <prefix>.__watermarks.
	WatermarkTopic string
	// Tables are the chosen tables; empty means every export the watermark topic names, that
	// Accept accepts when set.
	Tables []change.ExportID
	Accept func(change.ExportID) bool
	// TopicPrefix, when set, is cdc's topic prefix: a watermark record whose export's topic is
	// not the one cdc derives from it (change.TopicName) is refused.
	TopicPrefix string
	// WaitAll delays the first cut until every table in Tables has joined (is hydrated), so that
	// no cut shows one chosen table without another. Later re-copies still let the others go
	// on.
	WaitAll bool
	// HeldBytes bounds, per partition, what the reader reads ahead of what it delivers: a
	// partition is fetched while it holds less than this, then paused until parts take from
	// it. 0 means 4 MiB; negative pauses a partition as soon as it holds a record.
	HeldBytes int
	// PartChanges and PartBytes bound a part that Read returns (changes, and their estimated
	// memory). 0 means 10,000 changes and 16 MiB.
	PartChanges, PartBytes int
	// Kafka are the connection settings (brokers, TLS and SASL, bounds); when its Brokers are
	// empty, Brokers above is used with no security.
	Kafka kafkaconn.Settings
	// Opts are extra franz-go options: fetch sizes, or TLS and SASL (see SecurityOpts) when
	// Kafka is not set.
	Opts []kgo.Opt
	// Logger, nil for slog.Default().
	Logger *slog.Logger
	// Registry is the schema registry that Avro records name their schemas in; nil when the
	// topics hold none (an Avro record is then an error that says so).
	Registry *schemareg.Client
}

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("consumer closed")

// Reader delivers cuts. It is not safe for concurrent use.
type Reader struct {
	cfg    Config
	log    *slog.Logger
	client *kgo.Client
	st     *state
	paused map[string]map[int32]bool
	// heldBytes, partChanges and partBytes are the Config's bounds resolved.
	heldBytes, partChanges, partBytes int
	whole                             assembler // Next's
	// watermark and movedAt (unix nanoseconds) are what Watermark reports.
	watermark, movedAt atomic.Int64
	// partitions are the data topics' partition counts, as read when first assigned.
	partitions map[string]int
	// wmEnd is the watermark topic's end offset when the reader started (-1 until read), and
	// wmNext the offset after the last watermark record read: at wmEnd the reader has read
	// what cdc wrote before it, and says which chosen tables it did not find (reported again
	// every missingEvery while they are missing).
	wmEnd, wmNext int64
	missingAt     time.Time
}

// missingEvery is how often the reader repeats that chosen tables are not in the watermark
// topic.
const missingEvery = 5 * time.Minute

// New returns a reader that starts at the beginning of every chosen table's current copy (or
// at Resume's position, when called before the first Next).
func New(cfg Config) (*Reader, error) {
	var problems []error
	if len(cfg.Kafka.Brokers) == 0 {
		cfg.Kafka.Brokers = cfg.Brokers
	}
	if len(cfg.Kafka.Brokers) == 0 {
		problems = append(problems, errors.New("consumer: no brokers"))
	}
	if cfg.WatermarkTopic == "" {
		problems = append(problems, errors.New("consumer: no watermark topic"))
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := []kgo.Opt{
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		// A fetch in flight for the partitions not paused holds back the ones resumed: keep
		// the broker's wait short so that a resumed partition is fetched soon.
		kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.ConsumeTopics(cfg.WatermarkTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	cl, err := kafkaconn.NewClient(cfg.Kafka, append(opts, cfg.Opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	r := &Reader{cfg: cfg, log: log.With("stage", "consumer"), client: cl, st: newState(cfg.Tables, cfg.WaitAll), paused: map[string]map[int32]bool{}}
	r.st.decoders = formats.NewDecoders(cfg.Registry)
	r.st.accept = cfg.Accept
	if cfg.TopicPrefix != "" {
		r.st.topicOf = func(e change.ExportID) string { return change.TopicName(cfg.TopicPrefix, e) }
	}
	switch {
	case cfg.HeldBytes == 0:
		r.heldBytes = 4 << 20
	case cfg.HeldBytes > 0:
		r.heldBytes = cfg.HeldBytes
	default:
		r.heldBytes = 1
	}
	r.wmEnd = -1
	r.partChanges, r.partBytes = cfg.PartChanges, cfg.PartBytes
	if r.partChanges <= 0 {
		r.partChanges = 10_000
	}
	if r.partBytes <= 0 {
		r.partBytes = 16 << 20
	}
	return r, nil
}

// Resume makes the reader go on after the cut whose Position pos is. Call it before the first
// Next.
func (r *Reader) Resume(pos Position) error {
	return r.st.resume(pos)
}

// Close releases the client.
func (r *Reader) Close() { r.client.Close() }

// Ping asks every seed broker for metadata at once, on the reader's own client, and returns nil
// when one answers, or the last error when none does before ctx ends: the reader's fetches
// retry in silence, so a caller that wants a broker that cannot be reached (or accepts
// connections and never answers) to be an error asks first.
func (r *Reader) Ping(ctx context.Context) error {
	seeds := r.client.SeedBrokers()
	errs := make(chan error, len(seeds))
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, b := range seeds {
		go func() {
			_, err := b.Request(pctx, kmsg.NewPtrMetadataRequest())
			errs <- err
		}()
	}
	var err error
	for range seeds {
		if err = <-errs; err == nil {
			return nil
		}
	}
	return err
}

// SecurityOpts builds the TLS and SASL options from the CDC_KAFKA_TLS* and CDC_KAFKA_SASL*
// variables, read through getenv and checked as cdc checks them (every problem at once).
func SecurityOpts(getenv func(string) string) ([]kgo.Opt, error) {
	sec, problems := kafkaconn.ReadSecurityEnv(getenv).Security()
	if len(problems) > 0 {
		errs := make([]error, len(problems))
		for i, p := range problems {
			errs[i] = p
		}
		return nil, errors.Join(errs...)
	}
	opts, err := sec.ClientOpts()
	if err != nil {
		return nil, fmt.Errorf("kafka security: %w", err)
	}
	return opts, nil
}

// Next blocks until the next cut is complete and returns it whole, or until ctx ends. A
// joining table's load comes folded into its joining cut: the copy's rows and its changes up
// to the cut, after EventJoined. Next keeps a cut, and a joining table's whole load, in
// memory; Read delivers the same in bounded parts. Do not mix the two on one Reader.
func (r *Reader) Next(ctx context.Context) (*Cut, error) {
	for {
		part, err := r.Read(ctx)
		if err != nil {
			return nil, err
		}
		if c := r.whole.add(part); c != nil {
			return c, nil
		}
	}
}

// assembler makes whole cuts of parts: it keeps load parts until their table joins and folds
// them into the joining cut, after the events.
type assembler struct {
	loads map[change.ExportID][]Txn
	cut   *Cut
}

// add takes the next part and returns the cut it completes, if it does.
func (a *assembler) add(part *Cut) *Cut {
	if part.Load != nil {
		e := part.Load.Export
		if part.Part == 0 {
			delete(a.loads, e)
		}
		if a.loads == nil {
			a.loads = map[change.ExportID][]Txn{}
		}
		a.loads[e] = appendTxns(a.loads[e], part.Txns)
		return nil
	}
	if part.Part == 0 {
		a.cut = &Cut{LSN: part.LSN, Prev: part.Prev, Events: part.Events, Final: true}
		for _, ev := range part.Events {
			if ev.Kind == EventJoined {
				a.cut.Txns = appendTxns(a.cut.Txns, a.loads[ev.Export])
				delete(a.loads, ev.Export)
			}
		}
	}
	a.cut.Txns = appendTxns(a.cut.Txns, part.Txns)
	if !part.Final {
		return nil
	}
	c := a.cut
	a.cut = nil
	c.Tables, c.Position = part.Tables, part.Position
	for _, ev := range c.Events {
		if ev.Kind == EventJoined {
			// The loads and the cut hold parts of the same transactions: order them as one.
			c.Txns = regroup(c.Txns)
			break
		}
	}
	return c
}

// regroup orders the changes of txns by commit LSN (a copy's rows first), txId and sequence,
// and groups them again. A copy's row sorts at its LSN: no change of its key lies between
// that LSN and where the row was published.
func regroup(txns []Txn) []Txn {
	var all []*Change
	for i := range txns {
		for j := range txns[i].Changes {
			all = append(all, &txns[i].Changes[j])
		}
	}
	slices.SortStableFunc(all, compareChanges)
	return groupTxns(all)
}

// appendTxns appends txns to dst, joining the first to dst's last when they are one
// transaction (its changes spread over parts).
func appendTxns(dst, txns []Txn) []Txn {
	if len(txns) > 0 && len(dst) > 0 {
		l, f := &dst[len(dst)-1], &txns[0]
		if l.CommitLSN == f.CommitLSN && l.TxID == f.TxID && l.Snapshot == f.Snapshot {
			l.Changes = append(l.Changes, f.Changes...)
			txns = txns[1:]
		}
	}
	return append(dst, txns...)
}

// Read blocks until the next part is ready and returns it, or until ctx ends: a part of a
// cut, or a part of a table's load (Cut.Load). A cut's parts come one after another, with no
// load part between them; load parts come between cuts. Parts are bounded
// (Config.PartChanges, Config.PartBytes), and so is what the reader holds besides
// (Config.HeldBytes per partition read, plus a fetch): memory does not grow with a cut's or a
// table's size. Apply a cut's parts in one transaction and store the Final part's Position with
// them.
func (r *Reader) Read(ctx context.Context) (*Cut, error) {
	for {
		part, err := r.st.nextPart(r.partChanges, r.partBytes)
		if err != nil {
			return nil, err
		}
		if err := r.checkPartitions(ctx); err != nil {
			return nil, err
		}
		r.sync()
		if part != nil {
			return part, nil
		}
		r.reportMissing(ctx)
		if err := r.poll(ctx); err != nil {
			return nil, err
		}
	}
}

// sync starts and stops reading partitions as the state asks, and pauses every data partition
// that holds HeldBytes already, so that what lies past what is delivered stays in Kafka. A
// partition that a part waits for holds nothing, so it is never paused.
func (r *Reader) sync() {
	assign, unassign := r.st.takeAssignments()
	if len(unassign) > 0 {
		r.client.RemoveConsumePartitions(unassign)
		// The client keeps a partition's pause across removal: clear it, as r.paused does.
		r.client.ResumeFetchPartitions(unassign)
		for topic, ps := range unassign {
			for _, p := range ps {
				delete(r.paused[topic], p)
			}
		}
	}
	if len(assign) > 0 {
		add := make(map[string]map[int32]kgo.Offset, len(assign))
		for topic, ps := range assign {
			add[topic] = make(map[int32]kgo.Offset, len(ps))
			for p, off := range ps {
				if off < 0 {
					add[topic][p] = kgo.NewOffset().AtStart()
				} else {
					add[topic][p] = kgo.NewOffset().At(off)
				}
			}
		}
		r.client.AddConsumePartitions(add)
	}
	pause, resume := map[string][]int32{}, map[string][]int32{}
	for topic, ps := range r.st.parts {
		for p, pt := range ps {
			want := pt.reading(r.heldBytes)
			paused := r.paused[topic][p]
			switch {
			case want && paused:
				resume[topic] = append(resume[topic], p)
				delete(r.paused[topic], p)
			case !want && !paused:
				pause[topic] = append(pause[topic], p)
				if r.paused[topic] == nil {
					r.paused[topic] = map[int32]bool{}
				}
				r.paused[topic][p] = true
			}
		}
	}
	if len(pause) > 0 {
		r.client.PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		r.client.ResumeFetchPartitions(resume)
	}
}

// poll reads what the client has (blocking until something arrives or ctx ends): the data
// records first, then the watermark records, so that the partitions a watermark record makes
// the state start or stop reading change only between polls.
func (r *Reader) poll(ctx context.Context) error {
	fs := r.client.PollFetches(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	if fs.IsClientClosed() {
		return ErrClosed
	}
	var ferr error
	fs.EachError(func(topic string, p int32, err error) {
		switch {
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		case kerr.IsRetriable(err) || errors.Is(err, kerr.UnknownTopicOrPartition):
			r.log.Debug("fetch", "topic", topic, "partition", p, "error", err)
		default:
			if ferr == nil {
				ferr = fmt.Errorf("fetch %s[%d]: %w", topic, p, err)
			}
		}
	})
	if ferr != nil {
		return ferr
	}
	var wm []*kgo.Record
	var rerr error
	fs.EachPartition(func(fp kgo.FetchTopicPartition) {
		if fp.Topic == r.cfg.WatermarkTopic {
			wm = append(wm, fp.Records...)
			return
		}
		for _, rec := range fp.Records {
			if err := r.st.addRecord(rec.Topic, rec.Partition, rec.Offset, rec.Attrs.IsControl(), rec.Key, rec.Value, rec.Headers); err != nil && rerr == nil {
				rerr = err
			}
		}
	})
	if rerr != nil {
		return rerr
	}
	for _, rec := range wm {
		r.wmNext = max(r.wmNext, rec.Offset+1)
		if rec.Attrs.IsControl() {
			continue
		}
		if err := r.st.addWatermark(rec.Value, fmt.Sprintf("watermark topic %s[%d] offset %d", rec.Topic, rec.Partition, rec.Offset)); err != nil {
			return err
		}
	}
	if w := int64(r.st.maxW); w > r.watermark.Load() {
		r.watermark.Store(w)
		r.movedAt.Store(time.Now().UnixNano())
	}
	return nil
}

// Watermark returns the highest watermark the chosen tables' records have said so far, and
// when the reader read it (zero before any): what a health check compares with the cuts
// delivered. Safe to call from any goroutine.
func (r *Reader) Watermark() (change.LSN, time.Time) {
	at := r.movedAt.Load()
	if at == 0 {
		return 0, time.Time{}
	}
	return change.LSN(r.watermark.Load()), time.Unix(0, at)
}

// checkPartitions refuses a watermark record that makes the reader read a partition its topic
// lacks (or a topic that does not exist): no cdc writes one, and waiting for it would wait for
// ever. The error names the record.
func (r *Reader) checkPartitions(ctx context.Context) error {
	for topic, ps := range r.st.assign {
		n, known := r.partitions[topic]
		missing := func() (int32, bool) {
			for p := range ps {
				if int(p) >= n {
					return p, true
				}
			}
			return 0, false
		}
		if _, any := missing(); known && !any {
			continue
		}
		// Read the topic's metadata: the first time, and again when a partition is not in
		// what was read (partitions may have been added since).
		td, err := kadm.NewClient(r.client).ListTopics(ctx, topic)
		if err != nil {
			return fmt.Errorf("read the partitions of %s: %w", topic, err)
		}
		d, ok := td[topic]
		switch {
		case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
			n = 0
		case d.Err != nil:
			return fmt.Errorf("read the partitions of %s: %w", topic, d.Err)
		default:
			n = len(d.Partitions)
		}
		if r.partitions == nil {
			r.partitions = map[string]int{}
		}
		r.partitions[topic] = n
		if p, bad := missing(); bad {
			where := "a watermark record"
			if pt := r.st.parts[topic][p]; pt != nil && pt.t.where != "" {
				where = pt.t.where
			}
			if n == 0 {
				return fmt.Errorf("%s: export's topic %s does not exist: %w", where, topic, ErrContract)
			}
			return fmt.Errorf("%s: names partition %d of topic %s, which has %d partition(s): %w", where, p, topic, n, ErrContract)
		}
	}
	return nil
}

// reportMissing says, once the reader has read the watermark topic up to where it ended when
// the reader started, which chosen tables it holds no record of (a misspelt name, or a table
// cdc does not publish yet): the cuts wait for them. It says it again every missingEvery.
func (r *Reader) reportMissing(ctx context.Context) {
	if len(r.cfg.Tables) == 0 || r.missingAt.After(time.Now().Add(-missingEvery)) {
		return
	}
	if r.wmEnd < 0 {
		ends, err := kadm.NewClient(r.client).ListEndOffsets(ctx, r.cfg.WatermarkTopic)
		if err != nil {
			return
		}
		o, _ := ends.Lookup(r.cfg.WatermarkTopic, 0)
		if o.Err != nil {
			return
		}
		r.wmEnd = o.Offset
	}
	if r.wmNext < r.wmEnd {
		return
	}
	var missing []string
	for _, e := range r.cfg.Tables {
		if r.st.tables[e] == nil {
			missing = append(missing, e.String())
		}
	}
	r.missingAt = time.Now()
	if len(missing) == 0 {
		r.missingAt = time.Now().Add(100 * 365 * 24 * time.Hour) // found: no more reports
		return
	}
	r.log.Warn("chosen tables are not in the watermark topic: cdc does not publish them (yet), or the names are misspelt; the cuts wait for them",
		"tables", missing, "watermark_topic", r.cfg.WatermarkTopic)
}
