package sink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"

	"github.com/tidemark/cdc/internal/testenv"
)

// testEnv is a Kafka cluster for one test: kfake, or a real broker (CDC_TEST_KAFKA_BROKERS)
// shared with other tests, hence unique topic and transactional-id names.
type testEnv struct {
	brokers []string
	real    bool
	prefix  string // unique per test
}

// newFakeEnv starts an in-process kfake cluster that lives as long as the test.
func newFakeEnv(t testing.TB) *testEnv {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &testEnv{brokers: c.ListenAddrs(), prefix: uniquePrefix(t)}
}

// newRealEnv uses a real Kafka broker from internal/testenv (CDC_TEST_KAFKA_BROKERS,
// Docker, or one it starts from Maven Central jars); it skips with -short and fails in CI when
// no broker can be had.
func newRealEnv(t testing.TB) *testEnv {
	t.Helper()
	return &testEnv{brokers: testenv.Brokers(t), real: true, prefix: uniquePrefix(t)}
}

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func uniquePrefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return change.SanitizeTopic("t." + t.Name() + "." + hex.EncodeToString(b[:]))
}

// topic returns a topic name unique to this test.
func (e *testEnv) topic(name string) string { return e.prefix + "." + name }

// config returns a Sink config for this env with short timings.
func (e *testEnv) config(t testing.TB, d Delivery) Config {
	return Config{
		Brokers:            e.brokers,
		Delivery:           d,
		TransactionalID:    e.prefix + ".txn",
		Partitions:         3,
		ReplicationFactor:  1,
		WatermarkTopic:     e.topic("__watermarks"),
		Linger:             20 * time.Millisecond,
		Tick:               50 * time.Millisecond,
		TransactionTimeout: 30 * time.Second,
		Logger:             testLogger(t),
	}
}

func (e *testEnv) newSink(t testing.TB, cfg Config) *Sink {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func (e *testEnv) admin(t testing.TB) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// consume reads every record of topic up to its current end offsets. With committed set it
// reads read-committed (up to the last stable offsets). Control records are dropped.
func (e *testEnv) consume(t testing.TB, topic string, committed bool) []*kgo.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := e.admin(t)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("list end offsets of %s: %v", topic, err)
	}
	if committed {
		// Kafka writes commit markers after EndTxn returns: wait until the last stable offsets
		// reach the end (the tests leave no transaction open when they consume).
		for {
			stable, err := adm.ListCommittedOffsets(ctx, topic)
			if err != nil {
				t.Fatalf("list committed offsets of %s: %v", topic, err)
			}
			caught := true
			ends.Each(func(o kadm.ListedOffset) {
				if s, ok := stable.Lookup(topic, o.Partition); !ok || s.Offset < o.Offset {
					caught = false
				}
			})
			if caught {
				ends = stable
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("last stable offsets of %s never reached the end offsets", topic)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	want := map[int32]int64{}
	for p, lo := range ends[topic] {
		if lo.Err != nil {
			t.Fatalf("end offset of %s/%d: %v", topic, p, lo.Err)
		}
		if lo.Offset > 0 {
			want[p] = lo.Offset - 1
		}
	}
	if len(want) == 0 {
		return nil
	}
	iso := kgo.ReadUncommitted()
	if committed {
		iso = kgo.ReadCommitted()
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(iso),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for len(want) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consume %s: timed out; still waiting for %v", topic, want)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("consume %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
			if last, ok := want[r.Partition]; ok && r.Offset >= last {
				delete(want, r.Partition)
			}
		})
	}
	return out
}

// fakeProgress records the calls Run makes. respond, when set, returns the records for a
// Durable call (n counts calls from 1).
type fakeProgress struct {
	respond func(n int, units []*change.Unit) []change.Record

	mu      sync.Mutex
	events  []string // "D" and "C" in call order
	durable []durableCall
	signal  chan struct{} // receives after every Committed (never blocks)
}

type durableCall struct {
	units   []*change.Unit
	offsets change.Offsets
}

func newFakeProgress(respond func(int, []*change.Unit) []change.Record) *fakeProgress {
	return &fakeProgress{respond: respond, signal: make(chan struct{}, 1)}
}

func (p *fakeProgress) Durable(units []*change.Unit, offsets change.Offsets) []change.Record {
	p.mu.Lock()
	p.events = append(p.events, "D")
	p.durable = append(p.durable, durableCall{units: slices.Clone(units), offsets: offsets})
	n := len(p.durable)
	p.mu.Unlock()
	if p.respond == nil {
		return nil
	}
	return p.respond(n, units)
}

func (p *fakeProgress) Carry([]*change.Unit) []change.Record { return nil }

func (p *fakeProgress) Committed() {
	p.mu.Lock()
	p.events = append(p.events, "C")
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

// serve answers the sink's acks as the pipeline's owner does (on its own goroutine, which the
// sink waits for), until ctx ends, and returns the Acker to give Run.
func (p *fakeProgress) serve(ctx context.Context) Acker {
	acks, _ := p.serveUntil(ctx)
	return acks
}

// serveUntil is serve, and also returns a channel closed once the server stopped after ctx
// ended: every ack it took is handled then.
func (p *fakeProgress) serveUntil(ctx context.Context) (Acker, <-chan struct{}) {
	acks := make(chanAcker)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-ctx.Done():
				return
			case a := <-acks:
				switch a.kind {
				case 'P':
					a.reply <- p.Carry(a.units)
				case 'D':
					a.reply <- p.Durable(a.units, a.offsets)
				case 'C':
					p.Committed()
					a.reply <- nil
				}
			}
		}
	}()
	return acks, stopped
}

// chanAcker hands each call to the goroutine that serves the channel, and waits for its reply.
type chanAcker chan testAck

type testAck struct {
	kind    byte // 'P'roduced, 'D'urable, 'C'ommitted
	units   []*change.Unit
	offsets change.Offsets
	reply   chan []change.Record
}

func (c chanAcker) ask(ctx context.Context, a testAck) ([]change.Record, error) {
	a.reply = make(chan []change.Record, 1)
	select {
	case c <- a:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case recs := <-a.reply:
		return recs, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c chanAcker) Produced(ctx context.Context, units []*change.Unit) ([]change.Record, error) {
	return c.ask(ctx, testAck{kind: 'P', units: units})
}

func (c chanAcker) Durable(ctx context.Context, units []*change.Unit, offsets change.Offsets) ([]change.Record, error) {
	return c.ask(ctx, testAck{kind: 'D', units: units, offsets: offsets})
}

func (c chanAcker) Committed(ctx context.Context) error {
	_, err := c.ask(ctx, testAck{kind: 'C'})
	return err
}

func (p *fakeProgress) calls() ([]string, []durableCall) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events), slices.Clone(p.durable)
}

// waitCommittedUnits waits until Durable calls already committed carried at least n units.
func (p *fakeProgress) waitCommittedUnits(t testing.TB, n int) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		p.mu.Lock()
		units, committed := 0, 0
		for _, ev := range p.events {
			if ev == "C" {
				committed++
			}
		}
		for i, d := range p.durable {
			if i < committed {
				units += len(d.units)
			}
		}
		p.mu.Unlock()
		if units >= n {
			return
		}
		select {
		case <-p.signal:
		case <-deadline:
			t.Fatalf("timed out waiting for %d committed units (have %d)", n, units)
		}
	}
}

// runSink starts s.Run in a goroutine and returns a function waiting for its result.
func runSink(t testing.TB, s *Sink, in <-chan *change.Unit, p *fakeProgress) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	acks, served := p.serveUntil(ctx)
	go func() { done <- s.Run(ctx, in, acks) }()
	var once sync.Once
	var res error
	wait := func() error {
		once.Do(func() {
			select {
			case res = <-done:
			case <-time.After(60 * time.Second):
				cancel()
				res = fmt.Errorf("Run did not return within 60s: %w", <-done)
			}
			cancel()
			<-served
		})
		return res
	}
	t.Cleanup(func() { cancel(); _ = wait() })
	return wait
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// dataUnit builds a transaction unit with one record per key for topic.
func dataUnit(topic string, end change.LSN, keys ...string) *change.Unit {
	u := &change.Unit{Kind: change.KindTxn, Commit: end - 1, End: end}
	for i, k := range keys {
		u.Records = append(u.Records, change.Record{
			Topic:     topic,
			Partition: change.AnyPartition,
			Key:       []byte(k),
			Value:     fmt.Appendf(nil, "%s@%d#%d", k, end, i),
			Headers: []change.Header{
				{Key: "lsn", Value: []byte(end.String())},
				{Key: "op", Value: []byte("c")},
			},
		})
	}
	return u
}
