package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/sink"
)

// Config configures a Reader. Brokers and WatermarkTopic are required.
type Config struct {
	Brokers []string
	// WatermarkTopic is cdc's watermark topic, <prefix>.__watermarks.
	WatermarkTopic string
	// Tables are the chosen tables; empty means every export the watermark topic names.
	Tables []change.ExportID
	// WaitAll delays the first cut until every table in Tables has joined (is hydrated), so that
	// no cut shows one chosen table without another. Later re-copies still let the others go
	// on.
	WaitAll bool
	// HeldBytes bounds, per partition, what the reader reads ahead of the cut it is building
	// (records past that cut, held for later ones): a partition that has reached its target
	// keeps being fetched until it holds this much, then is paused. 0 means 4 MiB; negative
	// pauses a partition as soon as it reaches its target.
	HeldBytes int
	// Opts are extra franz-go options: TLS, SASL, fetch sizes (see SecurityOpts).
	Opts []kgo.Opt
	// Logger, nil for slog.Default().
	Logger *slog.Logger
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
	// heldBytes is Config.HeldBytes resolved.
	heldBytes int
}

// New returns a reader that starts at the beginning of every chosen table's current copy (or
// at Resume's position, when called before the first Next).
func New(cfg Config) (*Reader, error) {
	var problems []error
	if len(cfg.Brokers) == 0 {
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
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		// A fetch in flight for the partitions not paused holds back the ones resumed: keep
		// the broker's wait short so that a resumed partition is fetched soon.
		kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.ConsumeTopics(cfg.WatermarkTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	}
	cl, err := kgo.NewClient(append(opts, cfg.Opts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	r := &Reader{cfg: cfg, log: log.With("stage", "consumer"), client: cl, st: newState(cfg.Tables, cfg.WaitAll), paused: map[string]map[int32]bool{}}
	switch {
	case cfg.HeldBytes == 0:
		r.heldBytes = 4 << 20
	case cfg.HeldBytes > 0:
		r.heldBytes = cfg.HeldBytes
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

// SecurityOpts builds the TLS and SASL options from the CDC_KAFKA_TLS* and CDC_KAFKA_SASL*
// variables, read through getenv and checked as cdc checks them (every problem at once).
func SecurityOpts(getenv func(string) string) ([]kgo.Opt, error) {
	sec, problems := sink.ReadSecurityEnv(getenv).Security()
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

// Next blocks until the next cut is complete and returns it, or until ctx ends. See the package
// documentation for what a cut holds.
func (r *Reader) Next(ctx context.Context) (*Cut, error) {
	for {
		p, ok := r.st.plan()
		if !ok {
			r.sync(nil)
			if err := r.poll(ctx); err != nil {
				return nil, err
			}
			continue
		}
		for {
			need := r.st.need(p)
			if len(need) == 0 {
				cut := r.st.build(p)
				r.sync(nil)
				return cut, nil
			}
			r.sync(need)
			if err := r.poll(ctx); err != nil {
				return nil, err
			}
		}
	}
}

// sync starts and stops reading partitions as the state asks, and pauses every data partition
// that has no target to reach (need) and holds HeldBytes already, so that what lies past a cut
// stays in Kafka.
func (r *Reader) sync(need map[*part]int64) {
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
			_, want := need[pt]
			want = want || pt.heldBytes < r.heldBytes
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
		if rec.Attrs.IsControl() {
			continue
		}
		if err := r.st.addWatermark(rec.Value); err != nil {
			return fmt.Errorf("watermark topic %s[%d] offset %d: %w", rec.Topic, rec.Partition, rec.Offset, err)
		}
	}
	return nil
}
