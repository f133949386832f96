package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
)

// BenchmarkApplyVsUpsert applies the same rows (json envelopes' after images, as cdc publishes
// them) twice per iteration into a real PostgreSQL (CDC_TEST_PG_URL): through the applier (cuts
// of 500 rows, each one transaction with its progress row) and through a plain loop of pgx
// batches of INSERT ... ON CONFLICT DO UPDATE with typed parameters, one transaction per 500
// rows. It reports both rates and their ratio (applier / plain). Skipped under -short.
func BenchmarkApplyVsUpsert(b *testing.B) {
	url := testenv.NewDB(b)
	ctx := context.Background()
	const schema = `CREATE TABLE bench (id bigint PRIMARY KEY, n int NOT NULL, s text NOT NULL, amount numeric(12,2) NOT NULL, at timestamptz NOT NULL)`
	testenv.Exec(b, url, schema, `CREATE TABLE plain (LIKE bench INCLUDING ALL)`)
	const rows, per = 20_000, 500
	exportID := change.ExportID{Schema: "public", Table: "bench"}
	type row struct {
		ID     int64  `json:"id"`
		N      int32  `json:"n"`
		S      string `json:"s"`
		Amount string `json:"amount"`
		At     string `json:"at"`
	}
	var afters []json.RawMessage
	var keys []json.RawMessage
	for i := range rows {
		r := row{ID: int64(i), N: int32(i * 7), S: fmt.Sprintf("row %d with some text", i), Amount: fmt.Sprintf("%d.%02d", i, i%100),
			At: time.Unix(1_700_000_000+int64(i), 123456000).UTC().Format("2006-01-02T15:04:05.000000Z")}
		a, _ := json.Marshal(r)
		afters = append(afters, a)
		keys = append(keys, json.RawMessage(fmt.Sprintf(`{"id":%d}`, i)))
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	progress := pgx.Identifier{"public", "tidemark_apply_progress"}
	if err := ensureProgress(ctx, conn, progress); err != nil {
		b.Fatal(err)
	}
	a := &applier{conn: conn, progress: progress, name: "bench", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		tables: map[change.ExportID]*target{}, chunk: 512}
	var applyTime, plainTime time.Duration
	for b.Loop() {
		start := time.Now()
		for lo := 0; lo < rows; lo += per {
			bt := &batch{lsn: change.LSN(lo + 1), position: "{}", txns: 1, final: true}
			for i := lo; i < lo+per; i++ {
				bt.steps = append(bt.steps, step{kind: stepRecord, export: exportID, op: 'c', key: keys[i], after: afters[i]})
			}
			if _, err := a.apply(ctx, bt); err != nil {
				b.Fatal(err)
			}
		}
		applyTime += time.Since(start)

		start = time.Now()
		for lo := 0; lo < rows; lo += per {
			tx, err := conn.Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			var pb pgx.Batch
			for i := lo; i < lo+per; i++ {
				var r row
				if err := json.Unmarshal(afters[i], &r); err != nil {
					b.Fatal(err)
				}
				at, err := time.Parse(time.RFC3339Nano, r.At)
				if err != nil {
					b.Fatal(err)
				}
				pb.Queue(`INSERT INTO plain (id, n, s, amount, at) VALUES ($1, $2, $3, $4::numeric, $5)
ON CONFLICT (id) DO UPDATE SET n = EXCLUDED.n, s = EXCLUDED.s, amount = EXCLUDED.amount, at = EXCLUDED.at`, r.ID, r.N, r.S, r.Amount, at)
			}
			if err := tx.SendBatch(ctx, &pb).Close(); err != nil {
				b.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
		plainTime += time.Since(start)
	}
	n := float64(b.N * rows)
	applyRate, plainRate := n/applyTime.Seconds(), n/plainTime.Seconds()
	b.ReportMetric(applyRate, "apply-rows/s")
	b.ReportMetric(plainRate, "upsert-rows/s")
	b.ReportMetric(applyRate/plainRate, "ratio")
	b.Logf("applier %.0f rows/s, plain batched upsert %.0f rows/s: ratio %.2f", applyRate, plainRate, applyRate/plainRate)
	var same bool
	if err := conn.QueryRow(ctx, `SELECT NOT EXISTS (SELECT * FROM bench EXCEPT SELECT * FROM plain) AND (SELECT count(*) FROM bench) = (SELECT count(*) FROM plain)`).Scan(&same); err != nil || !same {
		b.Errorf("the applier and the plain loop wrote different rows (%v)", err)
	}
}

// BenchmarkLoadVsCopy loads the same rows (copy rows as cdc publishes them: json envelopes'
// after images, op r) into a real PostgreSQL (CDC_TEST_PG_URL): through the applier's load
// (parts of 10,000 rows in the loads' transaction, committed by a joining cut) and through a
// plain COPY FROM of the same rows as text. It reports both rates and their ratio (load /
// COPY). Skipped under -short.
func BenchmarkLoadVsCopy(b *testing.B) {
	url := testenv.NewDB(b)
	ctx := context.Background()
	testenv.Exec(b, url, `CREATE TABLE big (id bigint PRIMARY KEY, n int NOT NULL, pad text NOT NULL)`, `CREATE TABLE plain (LIKE big INCLUDING ALL)`)
	const rows, per = 100_000, 10_000
	e := change.ExportID{Schema: "public", Table: "big"}
	steps := make([]step, rows)
	var text []byte
	for i := range rows {
		pad := fmt.Sprintf("%x", i*7919) + strings.Repeat("p", 90)
		steps[i] = step{kind: stepRecord, export: e, op: 'r',
			key:   json.RawMessage(fmt.Sprintf(`{"id":%d}`, i)),
			after: json.RawMessage(fmt.Sprintf(`{"id":%d,"n":%d,"pad":%q}`, i, i%1000, pad))}
		text = fmt.Appendf(text, "%d\t%d\t%s\n", i, i%1000, pad)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	progress := pgx.Identifier{"public", "tidemark_apply_progress"}
	if err := ensureProgress(ctx, conn, progress); err != nil {
		b.Fatal(err)
	}
	a := &applier{conn: conn, progress: progress, name: "bench", log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		tables: map[change.ExportID]*target{}, chunk: 512, dial: func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }}
	defer a.close(ctx)
	var loadTime, copyTime time.Duration
	for b.Loop() {
		start := time.Now()
		for lo := 0; lo < rows; lo += per {
			bt := &batch{load: &consumer.Load{Export: e, Done: lo+per >= rows}, part: lo / per, final: lo+per >= rows, steps: steps[lo : lo+per]}
			if _, err := a.apply(ctx, bt); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := a.apply(ctx, &batch{lsn: 1, final: true, position: "{}", steps: []step{{kind: stepJoin, export: e}}}); err != nil {
			b.Fatal(err)
		}
		loadTime += time.Since(start)

		start = time.Now()
		tx, err := conn.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM plain`); err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Conn().PgConn().CopyFrom(ctx, bytes.NewReader(text), `COPY plain FROM STDIN`); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		copyTime += time.Since(start)
	}
	n := float64(b.N * rows)
	loadRate, copyRate := n/loadTime.Seconds(), n/copyTime.Seconds()
	b.ReportMetric(loadRate, "load-rows/s")
	b.ReportMetric(copyRate, "copy-rows/s")
	b.ReportMetric(loadRate/copyRate, "ratio")
	b.Logf("load %.0f rows/s, plain COPY %.0f rows/s: ratio %.2f", loadRate, copyRate, loadRate/copyRate)
	var same bool
	if err := conn.QueryRow(ctx, `SELECT NOT EXISTS (SELECT * FROM big EXCEPT SELECT * FROM plain) AND (SELECT count(*) FROM big) = (SELECT count(*) FROM plain)`).Scan(&same); err != nil || !same {
		b.Errorf("the load and the plain COPY wrote different rows (%v)", err)
	}
}
