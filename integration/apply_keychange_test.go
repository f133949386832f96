package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// TestApplyKeyChangesAfterChunkedCopy: a table of one chunk over three partitions, copied by a
// chunked copy on an idle database, then changed (key changes, updates, deletes) before
// tidemark-apply starts, so that its reader fetches the copy and the changes together. The
// copy's rows carry the chunk's low marker, and cdc's stream position does not move on the
// markers, so the record that says hydrated usually carries a watermark below them (5 of 6
// runs on an idle database). The replica must equal the source. Before the load took copy rows
// at or above that watermark, they reached the joining cut behind the changes of their
// partitions: the applier stopped on "move row ...: 0 rows affected, want 1" (TestCluster's CI
// run, seed 1796648663900103237), or, without a key change, put stale copied rows over newer
// ones.
func TestApplyKeyChangesAfterChunkedCopy(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const schema = `CREATE TABLE b (id bigint PRIMARY KEY, name text, qty int)`
	e.exec(schema,
		`INSERT INTO b SELECT g, 'name ' || g, g FROM generate_series(1, 1000) g`,
		// A larger table copied beside it, as in TestCluster (the usual case then: b's rows
		// above the watermark; with b alone, rarely).
		`CREATE TABLE a (id bigint PRIMARY KEY, v text)`,
		`INSERT INTO a SELECT g, md5(g::text) || repeat('x', 40) FROM generate_series(1, 30000) g`,
		`CREATE PUBLICATION it_pub FOR TABLE a, b`)
	replica := testenv.NewDB(t)
	testenv.Exec(t, replica, schema)

	vars := e.baseVars()
	vars["CDC_TOPIC_PARTITIONS"] = "3"
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, 1, "public.a", "public.b")
	e.exec(
		`UPDATE b SET id = id + 100000, name = name || '+' WHERE id % 10 = 0`, // 100 key changes
		`UPDATE b SET qty = qty + 1 WHERE id % 10 = 1`,
		`DELETE FROM b WHERE id % 10 = 2`,
	)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.b")
	t.Logf("copy rows at or above the first hydrated watermark: %s", copyAboveHydrated(e, "public.b"))

	a := e.startBinary(applyBinary, map[string]string{
		"APPLY_TARGET_URL":  replica,
		"APPLY_TABLES":      "public.b",
		"CDC_KAFKA_BROKERS": strings.Join(e.brokers, ","),
		"CDC_TOPIC_PREFIX":  e.prefix,
		"APPLY_LOG_FORMAT":  "text",
	})
	var diffs []string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(300 * time.Millisecond) {
		diffs = tableDiffs(t, e.pgURL, replica, "b")
		done, err := a.exited()
		if done {
			t.Fatalf("tidemark-apply exited: %v\n%s", err, tail(a.log.String(), 3000))
		}
		if len(diffs) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, d := range diffs[:min(len(diffs), 10)] {
		t.Error(d)
	}
}

// tableDiffs lists how table differs between the source and the replica (at most a few rows
// named, and the counts).
func tableDiffs(t *testing.T, source, replica, table string) []string {
	t.Helper()
	src, dst := tableText(t, source, table), tableText(t, replica, table)
	var diffs []string
	if len(src) != len(dst) {
		diffs = append(diffs, fmt.Sprintf("%s: %d rows in the source, %d in the replica", table, len(src), len(dst)))
	}
	for id, row := range src {
		for col, v := range row {
			if w, ok := dst[id][col]; !ok || w != v {
				diffs = append(diffs, fmt.Sprintf("%s id %s %s: source %q, replica %q", table, id, col, v, w))
			}
		}
	}
	return diffs
}

// copyAboveHydrated says how many of table's copy rows carry a source.lsn at or above the
// watermark of its first hydrated record.
func copyAboveHydrated(e *env, table string) string {
	e.t.Helper()
	id, err := change.ParseExportID(table)
	if err != nil {
		e.t.Fatal(err)
	}
	var w change.LSN
	for _, r := range e.readTopic(e.watermarkTopic()) {
		rec, err := watermark.Decode(r.Value)
		if err == nil && rec.Export == id && rec.State == watermark.StateHydrated && rec.Watermark != nil {
			w = *rec.Watermark
			break
		}
	}
	above, rows := 0, 0
	for _, r := range e.readTopic(e.topic(table)) {
		if env := decode(e.t, r); env != nil && env.Op == "r" {
			rows++
			if change.LSN(env.Source.LSN) >= w {
				above++
			}
		}
	}
	return fmt.Sprintf("%d of %d (watermark %s)", above, rows, w)
}
