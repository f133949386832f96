package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/watermark"
)

// queryStateByKey reads the rows of query keyed as the topic is: by a JSON object of keyCols.
func (e *env) queryStateByKey(query string, keyCols ...string) map[string]map[string]json.RawMessage {
	e.t.Helper()
	var args []string
	for _, k := range keyCols {
		args = append(args, quoteLiteral(k), `t.`+k)
	}
	rows, err := e.conn().Query(context.Background(), fmt.Sprintf(
		`SELECT json_build_object(%s)::text, row_to_json(t)::text FROM (%s) t`, strings.Join(args, ", "), query))
	if err != nil {
		e.t.Fatalf("%s: %v", query, err)
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

// assertPublished checks export's topic against the publication: no record (snapshot or change,
// before or after image) carries a column of excluded, and the topic materialised by key equals
// the rows of want, the query of the listed columns under the row filter.
func (e *env) assertPublished(export, want string, keyCols, excluded []string) {
	e.t.Helper()
	recs := e.readTopic(e.topic(export))
	checkOrder(e.t, recs)
	leaks := 0
	for _, r := range recs {
		env := decode(e.t, r)
		if env == nil {
			continue
		}
		for _, col := range excluded {
			_, inBefore := env.Before[col]
			_, inAfter := env.After[col]
			if inBefore || inAfter {
				if leaks < 5 {
					e.t.Errorf("%s: record at offset %d (op %s, snapshot %v) carries the excluded column %s: %s",
						export, r.Offset, env.Op, env.Source.Snapshot, col, r.Value)
				}
				leaks++
				break
			}
		}
	}
	if leaks > 0 {
		e.t.Errorf("%s: %d of %d records carry an excluded column", export, leaks, len(recs))
	}
	got := normState(e.t, materialize(e.t, recs))
	assertSameState(e.t, export, got, e.queryStateByKey(want, keyCols...))
	e.t.Logf("%s: %d records, %d keys", export, len(recs), len(got))
}

// lastRecordOfKey returns the envelope of the last record of key in recs (nil for a tombstone or
// none) and whether there was one.
func lastRecordOfKey(t testing.TB, recs []*kgo.Record, key string) (*envelope, bool) {
	t.Helper()
	var last *envelope
	found := false
	for _, r := range recs {
		if normKey(t, r.Key) == key {
			last, found = decode(t, r), true
		}
	}
	return last, found
}

// runResnapshot asks the running cdc at addr to copy table again.
func runResnapshot(t testing.TB, addr, table string) {
	t.Helper()
	cmd := exec.Command(cdcBinary, "resnapshot", table)
	cmd.Env = []string{"CDC_HTTP_ADDR=" + addr, "CDC_HTTP_TOKEN=" + httpToken}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cdc resnapshot %s: %v: %s", table, err, out)
	}
}

// createPeople creates people, whose ssn column the publications leave out, with rows rows in
// the regions eu, us and apac, and a replica identity over (id, region): a row filter on
// region needs region in the replica identity, and a column list must cover it.
func (e *env) createPeople(rows int) {
	e.t.Helper()
	e.exec(
		`CREATE TABLE people (id int NOT NULL, name text, region text NOT NULL, note text, ssn text)`,
		`CREATE UNIQUE INDEX people_id_region ON people (id, region)`,
		`ALTER TABLE people REPLICA IDENTITY USING INDEX people_id_region`,
		fmt.Sprintf(`INSERT INTO people SELECT g, 'name ' || g, (ARRAY['eu', 'us', 'apac'])[g %% 3 + 1], 'note ' || g, 'ssn-' || g
			FROM generate_series(1, %d) g`, rows),
		`ANALYZE people`,
	)
}

var (
	peopleKey = []string{"id", "region"}
	peopleID  = change.ExportID{Schema: "public", Table: "people"}
)

// TestPublicationFilter: a publication with a column list and a row filter, through both copy
// strategies, the stream (rows moving into and out of the filter) and a re-copy. people has a
// column list (ssn and note left out) and a filter on region; orders (REPLICA IDENTITY FULL,
// no column list) a filter on a column outside its key, so a row moving out of it keeps its
// key: PostgreSQL publishes that update as a delete, and one moving in as an insert.
func TestPublicationFilter(t *testing.T) {
	for _, strategy := range []string{"copy", "chunked"} {
		t.Run(strategy, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			e.createPeople(600)
			e.exec(
				`CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL, total int, card text)`,
				`ALTER TABLE orders REPLICA IDENTITY FULL`,
				`INSERT INTO orders SELECT g, CASE WHEN g % 4 = 0 THEN 'secret' ELSE 'open' END, g * 10, 'card ' || g
					FROM generate_series(1, 400) g`,
				`CREATE PUBLICATION `+e.pub+` FOR TABLE people (id, name, region) WHERE (region = 'eu'),
					orders WHERE (status <> 'secret')`,
			)
			rec := e.recordWatermarks()
			vars := e.baseVars()
			vars["CDC_SNAPSHOT_STRATEGY"] = strategy
			if strategy == "chunked" {
				vars["CDC_SNAPSHOT_CHUNK_ROWS"] = "50"
			}
			vars["CDC_HTTP_ADDR"] = freeAddr(t)
			vars["CDC_HTTP_TOKEN"] = httpToken
			p := e.startCDC(vars)
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.people", "public.orders")
			const (
				peopleWant = `SELECT id, name, region FROM people WHERE region = 'eu'`
				ordersWant = `SELECT * FROM orders WHERE status <> 'secret'`
			)
			e.assertPublished("public.people", peopleWant, peopleKey, []string{"ssn", "note"})
			e.assertPublished("public.orders", ordersWant, []string{"id"}, nil)

			e.exec(
				`INSERT INTO people SELECT g, 'new ' || g, (ARRAY['eu', 'us'])[g % 2 + 1], 'n', 'ssn-' || g FROM generate_series(1001, 1040) g`,
				`UPDATE people SET name = name || ' upd', ssn = 'changed' WHERE region = 'eu' AND id % 5 = 0`,
				`UPDATE people SET ssn = 'only the ssn' WHERE region = 'eu' AND id % 7 = 0`,
				`UPDATE people SET region = 'eu' WHERE region = 'us' AND id % 4 = 0`, // in
				`UPDATE people SET region = 'us' WHERE region = 'eu' AND id % 6 = 1`, // out
				`DELETE FROM people WHERE region = 'eu' AND id % 11 = 0`,
				`DELETE FROM people WHERE region = 'us' AND id % 13 = 0`,
				`UPDATE orders SET status = 'secret' WHERE status = 'open' AND id % 5 = 0`,                    // out
				`UPDATE orders SET status = 'open', total = total + 1 WHERE status = 'secret' AND id % 8 = 0`, // in
				`UPDATE orders SET total = total + 2 WHERE status = 'open' AND id % 3 = 0`,
				`DELETE FROM orders WHERE id % 17 = 0`,
			)
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.people", "public.orders")
			e.assertPublished("public.people", peopleWant, peopleKey, []string{"ssn", "note"})
			e.assertPublished("public.orders", ordersWant, []string{"id"}, nil)
			orders := e.readTopic(e.topic("public.orders"))
			// Order 5 moved out of the filter: its last record is a delete (or its tombstone).
			if env, ok := lastRecordOfKey(t, orders, `{"id":5}`); !ok || (env != nil && env.Op != "d") {
				t.Errorf("order 5 left the filter: last record %+v (found %v), want a delete", env, ok)
			}
			// Order 8 moved into it: an insert from the stream.
			if env, ok := lastRecordOfKey(t, orders, `{"id":8}`); !ok || env == nil || env.Op != "c" || env.Source.Snapshot {
				t.Errorf("order 8 entered the filter: last record %+v (found %v), want a create from the stream", env, ok)
			}

			runResnapshot(t, vars["CDC_HTTP_ADDR"], "public.people")
			rec.first(t, 2*time.Minute, peopleID, "hydrated by attempt 2", func(r watermark.Record) bool {
				return r.State == watermark.StateHydrated && r.Snapshot != nil && r.Snapshot.Attempt == 2
			})
			e.exec(`UPDATE people SET name = 'after the re-copy', ssn = 'x' WHERE id % 9 = 0`)
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.people", "public.orders")
			e.assertPublished("public.people", peopleWant, peopleKey, []string{"ssn", "note"})
		})
	}
}

// TestPublicationChanged: the publication's column list and row filter change while cdc runs.
// Each change copies the table again (one log line says why), and the topic follows: a column
// added to the list arrives for every row, rows that left the filter are deleted, rows that
// entered it arrive. Then rows leave the filter, and the filter changes, while cdc is stopped.
func TestPublicationChanged(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.createPeople(300)
	e.exec(`CREATE PUBLICATION ` + e.pub + ` FOR TABLE people (id, name, region) WHERE (region = 'eu')`)
	rec := e.recordWatermarks()
	vars := e.baseVars()
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.people")
	e.assertPublished("public.people", `SELECT id, name, region FROM people WHERE region = 'eu'`, peopleKey, []string{"ssn", "note"})

	steps := []struct {
		alter, want string
		excluded    []string
	}{
		{ // a column added, a wider filter
			`ALTER PUBLICATION ` + e.pub + ` SET TABLE people (id, name, region, note) WHERE (region IN ('eu', 'us'))`,
			`SELECT id, name, region, note FROM people WHERE region IN ('eu', 'us')`, []string{"ssn"},
		},
		{ // the column dropped again, another filter: the eu rows leave the topic
			`ALTER PUBLICATION ` + e.pub + ` SET TABLE people (id, name, region) WHERE (region = 'us')`,
			`SELECT id, name, region FROM people WHERE region = 'us'`, []string{"ssn"},
		},
	}
	for i, s := range steps {
		attempt := i + 2
		e.exec(s.alter)
		rec.first(t, 2*time.Minute, peopleID, fmt.Sprintf("hydrated by attempt %d", attempt), func(r watermark.Record) bool {
			return r.State == watermark.StateHydrated && r.Snapshot != nil && r.Snapshot.Attempt == attempt
		})
		e.exec(
			`UPDATE people SET name = name || ' +', note = note || ' +', ssn = 'y' WHERE id % 5 = 0`,
			fmt.Sprintf(`INSERT INTO people SELECT g, 'new', (ARRAY['eu', 'us'])[g %% 2 + 1], 'n', 's' FROM generate_series(%d, %d) g`,
				1000*attempt, 1000*attempt+9),
		)
		e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.people")
		e.assertPublished("public.people", s.want, peopleKey, s.excluded)
	}
	if n := strings.Count(p.log.String(), "column list or row filter of a table changed; copying it again"); n != len(steps) {
		t.Errorf("%d log lines about a changed publication, want %d", n, len(steps))
	}

	// While stopped: rows leave the filter (PostgreSQL sends their deletes when the stream
	// resumes), then the filter changes (the watermark records say what the copy read: the
	// table is copied again at start).
	const now = `SELECT id, name, region FROM people WHERE region = 'us'`
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	e.exec(`UPDATE people SET region = 'apac' WHERE region = 'us' AND id % 4 = 0`)
	p = e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.people")
	// note was in the list of step 1: only ssn was never published.
	e.assertPublished("public.people", now, peopleKey, []string{"ssn"})
	if code := p.stop(syscall.SIGTERM); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	e.exec(`ALTER PUBLICATION ` + e.pub + ` SET TABLE people (id, name, region) WHERE (region = 'apac')`)
	p = e.startCDC(vars)
	rec.first(t, 2*time.Minute, peopleID, "hydrated by attempt 4", func(r watermark.Record) bool {
		return r.State == watermark.StateHydrated && r.Snapshot != nil && r.Snapshot.Attempt == 4
	})
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.people")
	e.assertPublished("public.people", `SELECT id, name, region FROM people WHERE region = 'apac'`, peopleKey, []string{"ssn"})
}

// TestPublicationPartitionRoot: a partitioned table published through its root
// (publish_via_partition_root) with a column list and a row filter: the root's list and filter
// apply to every partition's rows, in the first copy (chunked), in the stream (a row moving
// between partitions, one moving out of the filter) and in the re-copy after a partition is
// attached (copy strategy, reconciled).
func TestPublicationPartitionRoot(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE pt (id int NOT NULL, region text NOT NULL, v text, secret text, PRIMARY KEY (id, region)) PARTITION BY LIST (region)`,
		`CREATE TABLE pt_a PARTITION OF pt FOR VALUES IN ('a')`,
		`CREATE TABLE pt_b PARTITION OF pt FOR VALUES IN ('b')`,
		`INSERT INTO pt SELECT g, r, 'v ' || g, 'secret ' || g FROM generate_series(1, 200) g, unnest(ARRAY['a', 'b']) r`,
		`CREATE TABLE pt_c (id int NOT NULL, region text NOT NULL CHECK (region = 'c'), v text, secret text, PRIMARY KEY (id, region))`,
		`INSERT INTO pt_c SELECT g, 'c', 'v ' || g, 'secret ' || g FROM generate_series(1, 200) g`,
		`CREATE PUBLICATION `+e.pub+` FOR TABLE pt (id, region, v) WHERE (region <> 'b' OR id % 2 = 0)
			WITH (publish_via_partition_root = true)`,
	)
	const want = `SELECT id, region, v FROM pt WHERE region <> 'b' OR id % 2 = 0`
	excluded := []string{"secret"}
	ptID := change.ExportID{Schema: "public", Table: "pt"}
	rec := e.recordWatermarks()
	p := e.startCDC(e.baseVars())
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.pt")
	e.assertPublished("public.pt", want, []string{"id", "region"}, excluded)

	e.partitionWrites(10_000, "a", "b")
	e.exec(
		`UPDATE pt SET secret = 'changed', v = v || ' s' WHERE id % 3 = 0`,
		`UPDATE pt SET id = id + 50001 WHERE region = 'b' AND id = 10002`, // out of the filter
		`UPDATE pt SET id = id + 50001 WHERE region = 'b' AND id = 10003`, // into it
	)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.pt")
	e.assertPublished("public.pt", want, []string{"id", "region"}, excluded)

	e.exec(`ALTER TABLE pt ATTACH PARTITION pt_c FOR VALUES IN ('c')`)
	rec.first(t, 2*time.Minute, ptID, "hydrated by attempt 2", func(r watermark.Record) bool {
		return r.State == watermark.StateHydrated && r.Snapshot != nil && r.Snapshot.Attempt >= 2
	})
	e.partitionWrites(20_000, "a", "c")
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.pt")
	e.assertPublished("public.pt", want, []string{"id", "region"}, excluded)
}

// TestPublicationMixedCase: a user-managed publication whose name has upper-case letters is
// streamed under its own name (PostgreSQL lower-cases unquoted names in publication_names).
func TestPublicationMixedCase(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.pub = "People_Pub"
	e.exec(
		`CREATE TABLE mc (id int PRIMARY KEY, v text)`,
		`INSERT INTO mc SELECT g, 'v ' || g FROM generate_series(1, 100) g`,
		`CREATE PUBLICATION "People_Pub" FOR TABLE mc`,
	)
	p := e.startCDC(e.baseVars())
	e.waitFor(p, 90*time.Second, e.currentLSN(ctx), "public.mc")
	e.exec(
		`INSERT INTO mc SELECT g, 'new ' || g FROM generate_series(101, 120) g`,
		`UPDATE mc SET v = v || ' upd' WHERE id % 3 = 0`,
		`DELETE FROM mc WHERE id % 10 = 0`,
	)
	e.waitFor(p, 90*time.Second, e.currentLSN(ctx), "public.mc")
	e.assertPublished("public.mc", `SELECT id, v FROM mc`, []string{"id"}, nil)
	if strings.Contains(p.log.String(), "does not exist") {
		t.Errorf("cdc logged a missing publication:\n%s", tail(p.log.String(), 2000))
	}
}

// TestPublicationKeyNotListed: a column list that leaves out the table's key (allowed in a
// publication of inserts only) would give its records an incomplete key: that table fails
// alone, saying why; the other table of the publication goes on.
func TestPublicationKeyNotListed(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE good (id int PRIMARY KEY, v text, secret text)`,
		`CREATE TABLE bad (id int PRIMARY KEY, v text)`,
		`INSERT INTO good SELECT g, 'v ' || g, 's' FROM generate_series(1, 50) g`,
		`INSERT INTO bad SELECT g, 'v ' || g FROM generate_series(1, 50) g`,
		`CREATE PUBLICATION `+e.pub+` FOR TABLE good (id, v), bad (v) WITH (publish = 'insert')`,
	)
	// cdc check says so beforehand.
	res := runCDC(t, e.baseVars(), time.Minute, "check")
	assertContains(t, res.out, "✗ table public.bad: load key of public.bad: table cannot be exported: the column list of publication it_pub leaves out the key column(s) id",
		"✓ table public.good: published with columns (id, v), every row")
	rec := e.recordWatermarks()
	p := e.startCDC(e.baseVars())
	failed := rec.first(t, 2*time.Minute, change.ExportID{Schema: "public", Table: "bad"}, "state failed",
		func(r watermark.Record) bool { return r.State == watermark.StateFailed })
	t.Logf("bad: %s", failed.Error)
	if !strings.Contains(failed.Error, "leaves out the key column(s) id") {
		t.Errorf("bad failed with %q; want it to name the key column the list leaves out", failed.Error)
	}
	e.exec(`INSERT INTO good SELECT g, 'new ' || g, 's' FROM generate_series(51, 60) g`, `INSERT INTO bad VALUES (51, 'new')`)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.good")
	e.assertPublished("public.good", `SELECT id, v FROM good`, []string{"id"}, []string{"secret"})
	if done, err := p.exited(); done {
		t.Fatalf("cdc exited: %v", err)
	}
}
