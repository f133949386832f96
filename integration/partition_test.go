package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// createPartitioned creates pt, partitioned by region into pt_a and pt_b with rows rows each,
// and pt_c, a table of the same shape with rows rows of region c, to be attached later.
func (e *env) createPartitioned(rows int) {
	e.t.Helper()
	e.exec(
		`CREATE TABLE pt (id int NOT NULL, region text NOT NULL, v text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)`,
		`CREATE TABLE pt_a PARTITION OF pt FOR VALUES IN ('a')`,
		`CREATE TABLE pt_b PARTITION OF pt FOR VALUES IN ('b')`,
		fmt.Sprintf(`INSERT INTO pt SELECT g, r, 'v ' || g FROM generate_series(1, %d) g, unnest(ARRAY['a', 'b']) r`, rows),
		`CREATE TABLE pt_c (id int NOT NULL, region text NOT NULL CHECK (region = 'c'), v text, PRIMARY KEY (id, region))`,
		fmt.Sprintf(`INSERT INTO pt_c SELECT g, 'c', 'v ' || g FROM generate_series(1, %d) g`, rows),
		`ANALYZE`,
	)
}

// partitionState reads table (pt or a leaf) keyed as the topic is: {"id":..,"region":..}.
func (e *env) partitionState(table string) map[string]map[string]json.RawMessage {
	e.t.Helper()
	rows, err := e.conn().Query(context.Background(), fmt.Sprintf(
		`SELECT json_build_object('id', id, 'region', region)::text, row_to_json(t)::text FROM %s t`, table))
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]map[string]json.RawMessage{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			e.t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			e.t.Fatal(err)
		}
		out[normKey(e.t, []byte(k))] = m
	}
	if err := rows.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) assertPartitionTopic(export, table string) {
	e.t.Helper()
	recs := e.readTopic(e.topic(export))
	checkOrder(e.t, recs)
	got := normState(e.t, materialize(e.t, recs))
	want := e.partitionState(table)
	assertSameState(e.t, export, got, want)
	e.t.Logf("%s: %d records, %d keys; table %s has %d rows", export, len(recs), len(got), table, len(want))
}

// partitionWrites changes rows of every partition through the root: inserts, updates, deletes
// and an update that moves a row to another partition.
func (e *env) partitionWrites(base int, regions ...string) {
	e.t.Helper()
	for _, r := range regions {
		e.exec(
			fmt.Sprintf(`INSERT INTO pt SELECT g, '%s', 'new ' || g FROM generate_series(%d, %d) g`, r, base, base+9),
			fmt.Sprintf(`UPDATE pt SET v = v || ' upd' WHERE region = '%s' AND id %% 7 = 0`, r),
			fmt.Sprintf(`DELETE FROM pt WHERE region = '%s' AND id %% 11 = 0`, r),
		)
	}
	if len(regions) > 1 {
		// Moves a row across partitions: a delete in one leaf, an insert in the other.
		e.exec(fmt.Sprintf(`UPDATE pt SET region = '%s', id = id + 100000 WHERE region = '%s' AND id = %d`, regions[1], regions[0], base))
	}
}

// TestPartitionedTable: a partitioned table under a publication with and without
// publish_via_partition_root, with a partition attached and one detached while running.
//
// Without publish_via_partition_root each leaf is an export with its own topic: the attached
// leaf is copied into a new topic; the detached one gets its removed record and its topic keeps
// what it had. With it, the root is one export and one topic: attaching or detaching a partition
// copies the root again with the copy strategy, which reconciles, so the attached partition's rows
// arrive as snapshot reads and the detached partition's rows leave the topic (a delete and a
// tombstone each).
func TestPartitionedTable(t *testing.T) {
	for _, viaRoot := range []bool{false, true} {
		t.Run(fmt.Sprintf("via_root_%v", viaRoot), func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			const rows = 500
			e.createPartitioned(rows)
			vars := e.baseVars()
			if viaRoot {
				e.exec(`CREATE PUBLICATION ` + e.pub + ` FOR TABLE pt WITH (publish_via_partition_root = true)`)
			} else {
				// Tidemark creates the publication (without publish_via_partition_root).
				vars["CDC_TABLES"] = "public.pt"
			}
			rec := e.recordWatermarks()
			p := e.startCDC(vars)
			exports := []string{"public.pt_a", "public.pt_b"}
			if viaRoot {
				exports = []string{"public.pt"}
			}
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), exports...)
			topics := e.listTopics(e.prefix + ".public.")
			t.Logf("topics: %v", topics)
			for _, leaf := range []string{"pt", "pt_a", "pt_b"} {
				want := viaRoot == (leaf == "pt")
				if got := containsString(topics, e.topic("public."+leaf)); got != want {
					t.Errorf("topic of %s exists: %v, want %v", leaf, got, want)
				}
			}
			e.partitionWrites(10_000, "a", "b")

			attachedAt := time.Now()
			e.exec(`ALTER TABLE pt ATTACH PARTITION pt_c FOR VALUES IN ('c')`)
			e.partitionWrites(20_000, "a", "c")
			ptID := change.ExportID{Schema: "public", Table: "pt"}
			recopied := func(attempt int) {
				// Noticed by a poll: the root is copied again (and reconciled) as attempt.
				r := rec.first(t, time.Minute, ptID, fmt.Sprintf("hydrated by attempt %d", attempt), func(r watermark.Record) bool {
					return r.State == watermark.StateHydrated && r.Snapshot != nil && r.Snapshot.Attempt >= attempt
				})
				t.Logf("pt copied again: attempt %d, strategy %s, %d rows", r.Snapshot.Attempt, r.Snapshot.Strategy, r.Snapshot.RowsCopied)
			}
			if viaRoot {
				recopied(2)
				e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.pt")
				e.assertPartitionTopic("public.pt", "pt")
			} else {
				e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.pt_a", "public.pt_b", "public.pt_c")
				e.assertPartitionTopic("public.pt_c", "pt_c")
			}

			e.exec(`ALTER TABLE pt DETACH PARTITION pt_b`)
			detachedAt := e.currentLSN(ctx)
			// Written to the detached table: no longer part of the partitioned table.
			e.exec(`UPDATE pt_b SET v = 'after detach' WHERE id = 1`)
			e.partitionWrites(30_000, "a", "c")
			end := e.currentLSN(ctx)
			if viaRoot {
				recopied(3)
				e.waitFor(p, 2*time.Minute, end, "public.pt")
				e.assertPartitionTopic("public.pt", "pt")
				var attempts []int
				for _, r := range rec.all() {
					if r.Export.Table == "pt" && r.State == watermark.StateHydrated && r.Snapshot != nil && r.Time.After(attachedAt) &&
						(len(attempts) == 0 || attempts[len(attempts)-1] != r.Snapshot.Attempt) {
						attempts = append(attempts, r.Snapshot.Attempt)
					}
				}
				t.Logf("pt hydrated by snapshot attempts %v after the attach", attempts)
			} else {
				e.waitFor(p, 2*time.Minute, end, "public.pt_a", "public.pt_c")
				removed := rec.first(t, time.Minute, change.ExportID{Schema: "public", Table: "pt_b"}, "state removed",
					func(r watermark.Record) bool { return r.State == watermark.StateRemoved })
				t.Logf("pt_b removed with final watermark %v (detached at %s)", removed.Watermark, detachedAt)
				for _, r := range e.readTopic(e.topic("public.pt_b")) {
					if env := decode(t, r); env != nil && env.Source.LSN >= uint64(detachedAt) {
						t.Errorf("pt_b's topic has a change at %s, after its detach (%s)", change.LSN(env.Source.LSN), detachedAt)
					}
				}
				e.assertPartitionTopic("public.pt_a", "pt_a")
				e.assertPartitionTopic("public.pt_c", "pt_c")
			}
			if n := strings.Count(p.log.String(), "pipeline failed; restarting"); n > 0 {
				t.Errorf("the pipeline restarted %d times", n)
			}
			if !viaRoot {
				// A restart with CDC_TABLES naming the partitioned table finds it in the
				// publication (listed by its partitions) and goes on.
				if code := p.stop(syscall.SIGTERM); code != 0 {
					t.Fatalf("exit code %d after SIGTERM", code)
				}
				p = e.startCDC(vars)
				e.partitionWrites(40_000, "a", "c")
				e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.pt_a", "public.pt_c")
				e.assertPartitionTopic("public.pt_a", "pt_a")
			}
		})
	}
}
