package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// writer runs random transactions until stopped.
type writer struct {
	stop chan struct{}
	done chan struct{}
	txns atomic.Int64
	err  atomic.Value
}

func (e *env) startWriter(ctx context.Context, bigRows int64) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		e.t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))
		for {
			select {
			case <-w.stop:
				return
			default:
			}
			tx, err := conn.Begin(ctx)
			if err != nil {
				w.err.Store(err)
				return
			}
			batch := &pgx.Batch{}
			for range 1 + rng.IntN(4) {
				switch rng.IntN(7) {
				case 0:
					batch.Queue(`INSERT INTO big (id, k, v, n) VALUES (nextval('big_new_ids'), 1, 'new', 1.5)`)
				case 1, 2:
					batch.Queue(`UPDATE big SET k = k + 1, v = md5(random()::text) WHERE id = $1`, 1+rng.Int64N(bigRows))
				case 3:
					batch.Queue(`DELETE FROM big WHERE id = $1`, 1+rng.Int64N(bigRows))
				case 4:
					batch.Queue(`INSERT INTO small_a (name, qty) VALUES ($1, $2)`, fmt.Sprintf("n%d", rng.IntN(1000)), rng.IntN(100))
				case 5:
					batch.Queue(`UPDATE small_a SET qty = qty + 1 WHERE id = $1`, 1+rng.IntN(1000))
				case 6:
					// key-changing update and jsonb
					batch.Queue(`UPDATE small_b SET id = id + 100000, doc = jsonb_set(doc, '{n}', to_jsonb(id)) WHERE id = (SELECT min(id) FROM small_b)`)
				}
			}
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				w.err.Store(err)
				_ = tx.Rollback(ctx)
				return
			}
			if err := tx.Commit(ctx); err != nil {
				w.err.Store(err)
				return
			}
			w.txns.Add(1)
		}
	}()
	return w
}

func (w *writer) finish(t testing.TB) int64 {
	t.Helper()
	close(w.stop)
	<-w.done
	if err, _ := w.err.Load().(error); err != nil {
		t.Fatalf("writer: %v", err)
	}
	return w.txns.Load()
}

// slotSampler records the slot's confirmed position over time.
type slotSample struct {
	at        time.Time
	confirmed change.LSN
}

func (e *env) sampleSlot(ctx context.Context) (stop func() []slotSample) {
	conn, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		e.t.Fatal(err)
	}
	var mu sync.Mutex
	var samples []slotSample
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer conn.Close(context.Background())
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			c := e.slotConfirmed(ctx, conn)
			mu.Lock()
			samples = append(samples, slotSample{at: time.Now(), confirmed: c})
			mu.Unlock()
		}
	}()
	return func() []slotSample {
		close(done)
		<-finished
		return samples
	}
}

// checkSlotNeverAhead asserts that whenever the slot was confirmed at C, every export that was
// hydrated had a durable own position >= C, produced before that moment: the slot never passed
// what Kafka had acknowledged. An export's durable own position is the higher of its last
// watermark record's position and the last checkpoint's (see watermark.Checkpoint): what a
// restart would resume it from.
func (e *env) checkSlotNeverAhead(samples []slotSample) {
	e.t.Helper()
	recs := e.readTopic(e.watermarkTopic())
	type wm struct {
		at  time.Time
		rec *watermark.Record
		cp  change.LSN
	}
	var all []wm
	view := watermark.NewView()
	for _, r := range recs {
		if r.Value == nil {
			continue
		}
		if cp, ok, err := watermark.DecodeCheckpoint(r.Value); ok {
			if err != nil {
				e.t.Fatalf("checkpoint record: %v", err)
			}
			all = append(all, wm{at: r.Timestamp, cp: cp.Position})
			continue
		}
		changed, err := view.Add(r.Value)
		if err != nil {
			e.t.Fatalf("watermark record: %v", err)
		}
		for _, id := range changed { // a quiet record changes every export it speaks for
			rec, _ := view.Get(id)
			all = append(all, wm{at: r.Timestamp, rec: &rec})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at.Before(all[j].at) })
	checked := 0
	for _, s := range samples {
		if s.confirmed == 0 {
			continue
		}
		latest := map[change.ExportID]watermark.Record{}
		var cp change.LSN
		for _, w := range all {
			if w.at.After(s.at) {
				break
			}
			if w.rec == nil {
				cp = max(cp, w.cp)
			} else {
				latest[w.rec.Export] = *w.rec
			}
		}
		for ex, r := range latest {
			if r.State != watermark.StateHydrated {
				continue
			}
			checked++
			if pos := max(r.Position, cp); pos < s.confirmed {
				e.t.Errorf("at %s the slot was confirmed at %s but %s's durable own position was %s (record %s, checkpoint %s)",
					s.at.Format(time.StampMilli), s.confirmed, ex, pos, r.Position, cp)
			}
		}
	}
	if checked == 0 {
		e.t.Errorf("slot check compared nothing (%d samples, %d watermark records)", len(samples), len(all))
	}
	e.t.Logf("slot never ahead: %d (sample, export) pairs checked over %d samples", checked, len(samples))
}

func (e *env) createTables(bigRows int) {
	e.exec(
		`CREATE TABLE big (id bigint PRIMARY KEY, k int NOT NULL, v text, n numeric(12,2))`,
		fmt.Sprintf(`INSERT INTO big SELECT g, g %% 1000, md5(g::text) || repeat('x', 40), g / 7.0 FROM generate_series(1, %d) g`, bigRows),
		`CREATE SEQUENCE big_new_ids START 10000000`,
		`CREATE TABLE small_a (id serial PRIMARY KEY, name text, qty int)`,
		`INSERT INTO small_a (name, qty) SELECT 'name ' || g, g FROM generate_series(1, 1000) g`,
		`CREATE TABLE small_b (id int PRIMARY KEY, doc jsonb)`,
		`INSERT INTO small_b SELECT g, jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g)) FROM generate_series(1, 500) g`,
		`ANALYZE`,
	)
}

// tableSQL renders each test table exactly as its topic should carry it: the record key, and the
// row as the codec encodes it (row_to_json over casts that follow the codec's mapping: numeric
// as a string, jsonb embedded).
var tableSQL = map[string]string{
	"public.big":     `SELECT '{"id":' || id || '}', row_to_json(t)::text FROM (SELECT id, k, v, n::text AS n FROM big) t`,
	"public.small_a": `SELECT '{"id":' || id || '}', row_to_json(t)::text FROM (SELECT id, name, qty FROM small_a) t`,
	"public.small_b": `SELECT '{"id":' || id || '}', row_to_json(t)::text FROM (SELECT id, doc FROM small_b) t`,
}

// assertTopicsEqualTables reads each table's topic once: per-key order holds, and the topic
// materialised by key equals the table byte for byte.
func (e *env) assertTopicsEqualTables(tables ...string) {
	e.t.Helper()
	for _, tbl := range tables {
		recs := e.readTopic(e.topic(tbl))
		state := materializeRaw(e.t, recs)
		want := make(map[string]string)
		rows, err := e.conn().Query(context.Background(), tableSQL[tbl])
		if err != nil {
			e.t.Fatal(err)
		}
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				e.t.Fatal(err)
			}
			want[k] = v
		}
		if err := rows.Err(); err != nil {
			e.t.Fatal(err)
		}
		bad := 0
		for k, v := range want {
			if got, ok := state[k]; !ok || got != v {
				if bad < 5 {
					e.t.Errorf("%s: key %s: topic has %q, table has %q", tbl, k, got, v)
				}
				bad++
			}
		}
		for k := range state {
			if _, ok := want[k]; !ok {
				if bad < 5 {
					e.t.Errorf("%s: key %s is in the topic but not in the table", tbl, k)
				}
				bad++
			}
		}
		if bad > 0 {
			e.t.Errorf("%s: %d rows in the table, %d keys in the topic, %d differences", tbl, len(want), len(state), bad)
		}
		e.t.Logf("%s: topic (%d records) equals table (%d rows)", tbl, len(recs), len(want))
	}
}

// materializeRaw applies the records in order, checking per-key order on the way (a record
// equal to one already seen for its key is a redelivery and is skipped); it returns each live
// key's after image as raw JSON.
func materializeRaw(t testing.TB, recs []*kgo.Record) map[string]string {
	t.Helper()
	type light struct {
		After  json.RawMessage `json:"after"`
		Op     string          `json:"op"`
		Source struct {
			LSN      uint64 `json:"lsn"`
			Sequence int64  `json:"sequence"`
			Snapshot bool   `json:"snapshot"`
		} `json:"source"`
	}
	type pos struct {
		lsn uint64
		seq int64
	}
	state := make(map[string]string)
	last := make(map[string]pos)
	seen := make(map[string]bool)
	disorder := 0
	for _, r := range recs {
		k := string(r.Key)
		if r.Value == nil {
			delete(state, k)
			continue
		}
		var env light
		if err := json.Unmarshal(r.Value, &env); err != nil {
			t.Fatalf("record %s[%d]@%d is not an envelope: %v", r.Topic, r.Partition, r.Offset, err)
		}
		if !env.Source.Snapshot {
			p := pos{env.Source.LSN, env.Source.Sequence}
			id := fmt.Sprintf("%s/%d/%d/%s", k, p.lsn, p.seq, env.Op)
			if !seen[id] {
				seen[id] = true
				if prev, ok := last[k]; ok && (p.lsn < prev.lsn || p.lsn == prev.lsn && p.seq < prev.seq) {
					if disorder < 5 {
						t.Errorf("key %s: change at lsn %d seq %d after lsn %d seq %d (offset %d)", k, p.lsn, p.seq, prev.lsn, prev.seq, r.Offset)
					}
					disorder++
				}
				last[k] = p
			}
		}
		switch env.Op {
		case "d":
			delete(state, k)
		case "t":
			clear(state)
		default:
			state[k] = string(env.After)
		}
	}
	return state
}

// checkNoDuplicates asserts exactly-once: no change (key, lsn, sequence) appears twice.
func (e *env) checkNoDuplicates(tables ...string) {
	e.t.Helper()
	for _, tbl := range tables {
		seen := map[string]int64{}
		for _, r := range e.readTopic(e.topic(tbl)) {
			env := decode(e.t, r)
			if env == nil || env.Source.Snapshot {
				continue
			}
			id := fmt.Sprintf("%s/%d/%d/%s", r.Key, env.Source.LSN, env.Source.Sequence, env.Op)
			if prev, ok := seen[id]; ok {
				e.t.Errorf("%s: change %s published twice (offsets %d and %d)", tbl, id, prev, r.Offset)
			}
			seen[id] = r.Offset
		}
	}
}

var allTables = []string{"public.big", "public.small_a", "public.small_b"}

func TestSnapshotStreamAndRestart(t *testing.T) {
	for _, delivery := range []string{"exactly-once", "at-least-once"} {
		t.Run(delivery, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			const bigRows = 200_000
			e.createTables(bigRows)

			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.big,public.small_a,public.small_b"
			vars["CDC_SNAPSHOT_WORKERS"] = "4"
			vars["CDC_DELIVERY"] = delivery
			stopSampling := e.sampleSlot(ctx)

			p := e.startCDC(vars)
			w := e.startWriter(ctx, bigRows)
			// Writes during the snapshot.
			e.waitFor(p, 3*time.Minute, 1, allTables...)
			time.Sleep(time.Second)
			n := w.finish(t)
			lsn := e.currentLSN(ctx)
			e.waitFor(p, 2*time.Minute, lsn, allTables...)
			t.Logf("snapshot + %d concurrent transactions published", n)
			if !containsLog(p, "snapshot") {
				t.Errorf("no snapshot progress in the log")
			}
			e.assertTopicsEqualTables(allTables...)

			// Kill -9 mid-stream, keep writing, restart: nothing lost.
			w = e.startWriter(ctx, bigRows)
			time.Sleep(2 * time.Second)
			p.stop(syscall.SIGKILL)
			time.Sleep(time.Second)
			p2 := e.startCDC(vars)
			time.Sleep(2 * time.Second)
			n = w.finish(t)
			lsn = e.currentLSN(ctx)
			e.waitFor(p2, 2*time.Minute, lsn, allTables...)
			t.Logf("%d more transactions across a kill -9", n)
			e.assertTopicsEqualTables(allTables...)
			if delivery == "exactly-once" {
				e.checkNoDuplicates(allTables...)
			}

			// SIGTERM stops cleanly with exit code 0.
			if code := p2.stop(syscall.SIGTERM); code != 0 {
				t.Errorf("cdc exit code after SIGTERM = %d, want 0", code)
			}
			e.checkSlotNeverAhead(stopSampling())
		})
	}
}

func containsLog(p *proc, s string) bool { return strings.Contains(p.log.String(), s) }
