package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// forgedLSN is the watermark of issue 29's forged record.
const forgedLSN = change.LSN(0xFFFFFFFFFFFFFF00)

// TestRestoreCheck (issue 29): a record in the watermark topic whose watermark is past the end
// of the server's WAL, which cdc cannot have written, stops cdc at its next start with exit 1
// and a message naming the record (topic, partition, offset), its value and the bound, before
// cdc writes anything; cdc never takes the value up. Restarts of cdc's own topic, after an
// orderly stop and after a kill (Kafka then may be ahead of the slot), still work.
func TestRestoreCheck(t *testing.T) {
	t.Run("legitimate restarts", func(t *testing.T) {
		e := newEnv(t)
		ctx := t.Context()
		e.exec(`CREATE TABLE t (id int PRIMARY KEY, v text)`, `INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g`)
		vars := e.baseVars()
		vars["CDC_TABLES"] = "public.t"
		p := e.startCDC(vars)
		e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.t")
		if code := p.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("orderly stop: exit %d", code)
		}

		e.exec(`INSERT INTO t SELECT g, 'v' || g FROM generate_series(101, 200) g`)
		p = e.startCDC(vars)
		e.waitFor(p, time.Minute, e.currentLSN(ctx), "public.t")
		// Changes and their watermarks reach Kafka before the slot is confirmed: killed right
		// after a watermark, Kafka is usually ahead of the slot.
		e.exec(`UPDATE t SET v = v || 'x' WHERE id <= 50`)
		recs := e.waitFor(p, time.Minute, e.currentLSN(ctx), "public.t")
		p.stop(syscall.SIGKILL)
		c := e.conn()
		w := recs[change.ExportID{Schema: "public", Table: "t"}].Watermark
		t.Logf("killed: watermark in Kafka %s, slot confirmed at %s", w, e.slotConfirmed(ctx, c))

		e.exec(`DELETE FROM t WHERE id > 150`)
		p = e.startCDC(vars)
		e.waitFor(p, time.Minute, e.currentLSN(ctx), "public.t")
		if code := p.stop(syscall.SIGTERM); code != 0 {
			t.Fatalf("orderly stop after the restarts: exit %d", code)
		}
		if strings.Contains(p.log.String(), "is past the end") {
			t.Errorf("a restart of cdc's own topic was refused:\n%s", tail(p.log.String(), 3000))
		}
		assertSameState(t, "public.t", materialize(t, e.readTopic(e.topic("public.t"))), e.tableState("t", "id"))
	})

	for _, tc := range []struct {
		name  string
		key   string
		forge func(last watermark.Record) ([]byte, error)
		field string
	}{
		{name: "quiet record", key: watermark.QuietKey, field: "the quiet record's watermark",
			forge: func(last watermark.Record) ([]byte, error) {
				w := forgedLSN
				return watermark.EncodeQuiet(watermark.Quiet{Mode: last.Mode, Watermark: &w, Position: last.Position, Time: time.Now()})
			}},
		{name: "own record", key: "public.t", field: "public.t's watermark",
			forge: func(last watermark.Record) ([]byte, error) {
				w := forgedLSN
				last.Watermark, last.WatermarkLSN, last.Time = &w, nil, time.Now()
				return watermark.Encode(last)
			}},
	} {
		t.Run("forged "+tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			e.exec(`CREATE TABLE t (id int PRIMARY KEY, v text)`, `INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g`)
			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.t"
			p := e.startCDC(vars)
			recs := e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.t")
			if code := p.stop(syscall.SIGTERM); code != 0 {
				t.Fatalf("orderly stop: exit %d", code)
			}
			last := recs[change.ExportID{Schema: "public", Table: "t"}]

			// Someone who can write the watermark topic writes one record.
			value, err := tc.forge(last)
			if err != nil {
				t.Fatal(err)
			}
			topic := e.watermarkTopic()
			offset := e.produce(ctx, topic, tc.key, value)
			t.Logf("forged %s at %s partition 0 offset %d: %s", tc.name, topic, offset, value)

			// cdc's next start stops, naming the record.
			e.exec(`INSERT INTO t VALUES (1000, 'after')`)
			start := time.Now()
			p = e.startCDC(vars)
			exited, took := awaitExit(p, 30*time.Second, start)
			if !exited {
				p.stop(syscall.SIGTERM)
				t.Errorf("cdc still running %s after its start with the forged record; it took the record up", took)
			} else {
				t.Logf("cdc refused in %s", took.Round(time.Millisecond))
			}
			out := p.log.String()
			if code := p.stop(syscall.SIGTERM); exited && code != 1 {
				t.Errorf("exit %d, want 1", code)
			}
			forged := e.valuesAtOrAbove(topic, offset, forgedLSN)
			if len(forged) > 0 {
				t.Errorf("cdc wrote %d watermark-topic records at or above %s after the forged one, e.g. offset %d: %s",
					len(forged), forgedLSN, forged[0].Offset, forged[0].Value)
			}
			if !exited {
				t.FailNow()
			}
			if after := e.endOffsets(topic)[0]; after != offset+1 {
				t.Errorf("cdc wrote %d records to the watermark topic before it stopped", after-offset-1)
			}
			for line := range strings.Lines(out) {
				if strings.Contains(line, "is past the end") {
					t.Logf("refusal: %s", strings.TrimSpace(line))
				}
			}
			where := fmt.Sprintf("watermark topic %s partition 0 offset %d: %s %s is past the end of this server's WAL", topic, offset, tc.field, forgedLSN)
			for _, want := range []string{where, "not written by cdc for this database", "delete the watermark topic " + topic} {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, tail(out, 3000))
				}
			}
			m := regexp.MustCompile(`\(pg_current_wal_insert_lsn\(\)\), ([0-9A-F]+/[0-9A-F]+)`).FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("output names no bound:\n%s", tail(out, 3000))
			}
			bound, err := change.ParseLSN(m[1])
			if err != nil {
				t.Fatal(err)
			}
			if now := e.currentLSN(ctx); bound < *last.Watermark || bound > now {
				t.Errorf("bound %s named, want between the last watermark %s and the WAL now %s", bound, *last.Watermark, now)
			}
		})
	}
}

// produce writes one record to topic, as anyone with write access can, and returns its offset.
func (e *env) produce(ctx context.Context, topic, key string, value []byte) int64 {
	e.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	r, err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: value}).First()
	if err != nil {
		e.t.Fatalf("produce to %s: %v", topic, err)
	}
	return r.Offset
}

// awaitExit waits up to timeout for p to exit and reports whether it did and how long after
// start.
func awaitExit(p *proc, timeout time.Duration, start time.Time) (bool, time.Duration) {
	deadline := start.Add(timeout)
	for time.Now().Before(deadline) {
		if done, _ := p.exited(); done {
			return true, time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false, time.Since(start)
}

// valuesAtOrAbove returns the records of the watermark topic after offset that carry an LSN at
// or above lsn: a watermark, a position, a consistent point.
func (e *env) valuesAtOrAbove(topic string, offset int64, lsn change.LSN) []*kgo.Record {
	e.t.Helper()
	var out []*kgo.Record
	for _, r := range e.readTopic(topic) {
		if r.Offset <= offset || r.Value == nil {
			continue
		}
		var lsns []change.LSN
		if cp, ok, err := watermark.DecodeCheckpoint(r.Value); ok {
			if err != nil {
				e.t.Fatal(err)
			}
			lsns = append(lsns, cp.Position)
		} else if q, ok, err := watermark.DecodeQuiet(r.Value); ok {
			if err != nil {
				e.t.Fatal(err)
			}
			lsns = append(lsns, q.Position)
			if q.Watermark != nil {
				lsns = append(lsns, *q.Watermark)
			}
		} else {
			rec, err := watermark.Decode(r.Value)
			if err != nil {
				e.t.Fatal(err)
			}
			lsns = append(lsns, rec.Position)
			if rec.Watermark != nil {
				lsns = append(lsns, *rec.Watermark)
			}
		}
		for _, l := range lsns {
			if l >= lsn {
				out = append(out, r)
				break
			}
		}
	}
	return out
}
