package consumer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/watermark"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// fakeCDC writes topics the way cdc's sink does: records from pkg/codec's encoder, watermark,
// quiet and checkpoint records from pkg/watermark, each batch in one Kafka transaction, truncates
// on every partition, and watermark offsets that are the next offset after the last record
// acknowledged (the commit marker lies at it).
type fakeCDC struct {
	t       testing.TB
	brokers []string
	prefix  string
	wmTopic string
	parts   int32
	cl      *kgo.Client
	enc     map[change.ExportID]*codec.Encoder
	next    map[string]map[int32]int64
	batch   []*kgo.Record
	at      time.Time
	format  codec.Format
}

func uniquePrefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return change.SanitizeTopic("c." + t.Name() + "." + hex.EncodeToString(b[:]))
}

// newFake starts a kfake cluster with parts partitions per data topic.
func newFake(t testing.TB, parts int32, format codec.Format) *fakeCDC {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatalf("kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return newFakeOn(t, c.ListenAddrs(), parts, format)
}

// newFakeOn writes to brokers (a real cluster for the benchmark).
func newFakeOn(t testing.TB, brokers []string, parts int32, format codec.Format) *fakeCDC {
	t.Helper()
	prefix := uniquePrefix(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(prefix+".tx"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f := &fakeCDC{t: t, brokers: brokers, prefix: prefix, wmTopic: prefix + ".__watermarks", parts: parts, cl: cl,
		enc: map[change.ExportID]*codec.Encoder{}, next: map[string]map[int32]int64{},
		at: time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)}
	f.createTopic(f.wmTopic, 1)
	f.format = format
	return f
}

func (f *fakeCDC) createTopic(topic string, parts int32) {
	f.t.Helper()
	adm := kadm.NewClient(f.cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, parts, 1, nil, topic); err != nil {
		f.t.Fatalf("create %s: %v", topic, err)
	}
	f.next[topic] = map[int32]int64{}
	for p := range parts {
		f.next[topic][p] = 0
	}
}

// table makes export e (columns id int4 key, v text) and its topic.
func (f *fakeCDC) table(name string) change.ExportID {
	f.t.Helper()
	e := change.ExportID{Schema: "public", Table: name}
	enc, err := codec.NewEncoder(codec.Config{TopicPrefix: f.prefix, Database: "db", Tombstones: true, Format: f.format},
		&change.Table{Export: e, Columns: []change.Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "v", TypeOID: 25, TypeMod: -1}}})
	if err != nil {
		f.t.Fatal(err)
	}
	f.enc[e] = enc
	f.createTopic(enc.Topic(), f.parts)
	return e
}

func (f *fakeCDC) topic(e change.ExportID) string { return f.enc[e].Topic() }

// add queues the records of a change for the next flush.
func (f *fakeCDC) add(recs []change.Record, err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, r := range recs {
		hs := make([]kgo.RecordHeader, len(r.Headers))
		for i, h := range r.Headers {
			hs[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
		}
		switch r.Partition {
		case change.AllPartitions:
			for p := range f.parts {
				f.batch = append(f.batch, &kgo.Record{Topic: r.Topic, Partition: p, Key: r.Key, Value: r.Value, Headers: hs})
			}
		default:
			h := fnv.New32a()
			h.Write(r.Key)
			f.batch = append(f.batch, &kgo.Record{Topic: r.Topic, Partition: int32(h.Sum32() % uint32(f.parts)), Key: r.Key, Value: r.Value, Headers: hs})
		}
	}
}

func src(lsn change.LSN, xid uint32, seq int64) codec.Source {
	return codec.Source{LSN: lsn, Xid: xid, Seq: seq, Time: time.Unix(1700000000, 0)}
}

func row(id int, v string) [][]byte { return [][]byte{[]byte(strconv.Itoa(id)), []byte(v)} }

func (f *fakeCDC) insert(e change.ExportID, lsn change.LSN, xid uint32, seq int64, id int, v string) {
	f.add(f.enc[e].Insert(nil, src(lsn, xid, seq), row(id, v)))
}

func (f *fakeCDC) update(e change.ExportID, lsn change.LSN, xid uint32, seq int64, id int, v string) {
	f.add(f.enc[e].Update(nil, src(lsn, xid, seq), row(id, ""), row(id, v), nil))
}

func (f *fakeCDC) delete(e change.ExportID, lsn change.LSN, xid uint32, seq int64, id int) {
	f.add(f.enc[e].Delete(nil, src(lsn, xid, seq), row(id, "")))
}

func (f *fakeCDC) truncate(e change.ExportID, lsn change.LSN, xid uint32, seq int64) {
	f.add(f.enc[e].Truncate(nil, src(lsn, xid, seq)))
}

// copyRows queues a snapshot's rows (op r, source.lsn cp-1).
func (f *fakeCDC) copyRows(e change.ExportID, cp change.LSN, attempt int, ids ...int) {
	for i, id := range ids {
		s := src(cp-1, 0, int64(i))
		s.Snapshot, s.Attempt = true, attempt
		f.add(f.enc[e].Read(nil, s, row(id, "copy")))
	}
}

// offsets are e's topic's next offsets now (what a watermark record written now names).
func (f *fakeCDC) offsets(e change.ExportID) map[int32]int64 {
	out := map[int32]int64{}
	for p, o := range f.next[f.topic(e)] {
		out[p] = o
	}
	return out
}

// mark queues e's watermark record.
func (f *fakeCDC) mark(e change.ExportID, state watermark.State, w change.LSN, attempt int, start map[int32]int64) {
	f.t.Helper()
	f.at = f.at.Add(time.Second)
	r := watermark.Record{Export: e, Topic: f.topic(e), State: state, Mode: watermark.ModeIndependent, Position: w,
		Offsets: f.offsets(e), Time: f.at, Snapshot: &watermark.SnapshotInfo{Attempt: attempt, StartOffsets: start}}
	if state == watermark.StateFailed {
		r.Error = "boom"
	}
	if w != 0 {
		r.Watermark = &w
	}
	b, err := watermark.Encode(r)
	if err != nil {
		f.t.Fatal(err)
	}
	f.batch = append(f.batch, &kgo.Record{Topic: f.wmTopic, Key: r.Key(), Value: b})
}

// quiet queues a quiet record.
func (f *fakeCDC) quiet(w change.LSN, busy ...change.ExportID) {
	f.t.Helper()
	f.at = f.at.Add(time.Second)
	b, err := watermark.EncodeQuiet(watermark.Quiet{Mode: watermark.ModeIndependent, Watermark: &w, Position: w, Busy: busy, Time: f.at})
	if err != nil {
		f.t.Fatal(err)
	}
	f.batch = append(f.batch, &kgo.Record{Topic: f.wmTopic, Key: []byte(watermark.QuietKey), Value: b})
}

// checkpoint queues a checkpoint record.
func (f *fakeCDC) checkpoint(pos change.LSN) {
	b, err := watermark.EncodeCheckpoint(pos, nil, f.at)
	if err != nil {
		f.t.Fatal(err)
	}
	f.batch = append(f.batch, &kgo.Record{Topic: f.wmTopic, Key: []byte(watermark.CheckpointKey), Value: b})
}

// flush writes the queued records in one Kafka transaction (commit, or abort when abort).
// Records queued with mark see the offsets as of their queueing, so mark after the data.
func (f *fakeCDC) flush(abort bool) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.cl.BeginTransaction(); err != nil {
		f.t.Fatal(err)
	}
	for _, r := range f.batch {
		if r.Topic == f.wmTopic {
			r.Partition = 0
		}
	}
	res := f.cl.ProduceSync(ctx, f.batch...)
	if err := res.FirstErr(); err != nil {
		f.t.Fatal(err)
	}
	f.batch = nil
	end := kgo.TryCommit
	if abort {
		end = kgo.TryAbort
	}
	if err := f.cl.EndTransaction(ctx, end); err != nil {
		f.t.Fatal(err)
	}
}

// Data records must be produced before the watermark record naming their offsets is built, so
// tests call step: flush the data, then queue and flush the marks.
func (f *fakeCDC) step(marks func()) {
	f.t.Helper()
	f.flushTracked()
	if marks != nil {
		marks()
		f.flushTracked()
	}
}

// flushTracked is flush that tracks the next offsets of the data topics.
func (f *fakeCDC) flushTracked() {
	f.t.Helper()
	if len(f.batch) == 0 {
		return
	}
	recs := f.batch
	f.flush(false)
	for _, r := range recs {
		if r.Topic != f.wmTopic {
			f.next[r.Topic][r.Partition] = max(f.next[r.Topic][r.Partition], r.Offset+1)
		}
	}
}

// reader returns a reader of the fake's topics.
func (f *fakeCDC) reader(tables []change.ExportID, waitAll bool) *Reader {
	f.t.Helper()
	rd, err := New(Config{Brokers: f.brokers, WatermarkTopic: f.wmTopic, Tables: tables, WaitAll: waitAll, TopicPrefix: f.prefix})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(rd.Close)
	return rd
}

// next returns the next cut, failing the test after a timeout.
func next(t testing.TB, rd *Reader) *Cut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := rd.Next(ctx)
	if err != nil {
		t.Fatalf("next cut: %v", err)
	}
	return c
}

// dump describes the state's tables, for a failing test.
func (s *state) dump() string {
	out := fmt.Sprintf("lastC=%d run=%v events=%d resumed=%v\n", s.lastC, s.run != nil, len(s.events), s.resumed)
	for _, t := range s.sortedTables() {
		w, ok := t.lastW()
		out += fmt.Sprintf("  %s phase=%d att=%d held=%v/%d hydW=%d w=%d/%v final=%v parts=%d\n", t.id.Table, t.phase, t.attempt, t.held, t.heldAt, t.hydW, w, ok, t.final != nil, len(t.parts))
	}
	return out
}

// noCut fails the test if rd delivers a cut within d.
func noCut(t testing.TB, rd *Reader, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if c, err := rd.Next(ctx); err == nil {
		t.Fatalf("a cut while none may come: %s", describe(c))
	}
}

// describe renders a cut compactly: "LSN [events] lsn/xid:table.op.id,..."
func describe(c *Cut) string {
	s := fmt.Sprintf("%d", c.LSN)
	for _, e := range c.Events {
		s += fmt.Sprintf(" %s:%s", e.Kind, e.Export.Table)
	}
	for _, tx := range c.Txns {
		s += fmt.Sprintf(" %d/%d:", tx.CommitLSN, tx.TxID)
		for i, ch := range tx.Changes {
			if i > 0 {
				s += ","
			}
			s += fmt.Sprintf("%s.%c%s", ch.Export.Table, ch.Op, keyID(ch.Key))
		}
	}
	return s
}

// keyID is the id of a key {"id":N} ("" for others).
func keyID(k []byte) string {
	const pre = `{"id":`
	if len(k) > len(pre) && string(k[:len(pre)]) == pre {
		return string(k[len(pre) : len(k)-1])
	}
	return ""
}
