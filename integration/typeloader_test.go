package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testenv"
)

// TestTypeLoaderConnections: with json-with-schema and columns of an enum, a domain and a
// composite type, cdc's connections to the source stay as many while tables with types the
// catalog has not loaded are added. On c9cb695 the type loader kept each connection it opened
// in the start-up plan's field, so each load but the last, and the start-up connection, leaked
// (and concurrent loads raced: TestTypeLoaderConcurrent in pkg/pipeline).
func TestTypeLoaderConnections(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(`CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')`,
		`CREATE DOMAIN posint AS int CHECK (VALUE > 0)`,
		`CREATE TYPE pair AS (a int, b text)`,
		`CREATE TABLE t_enum (id int PRIMARY KEY, m mood)`,
		`CREATE TABLE t_dom (id int PRIMARY KEY, p posint)`,
		`CREATE TABLE t_comp (id int PRIMARY KEY, c pair)`,
		`INSERT INTO t_enum VALUES (1, 'ok')`, `INSERT INTO t_dom VALUES (1, 5)`, `INSERT INTO t_comp VALUES (1, ROW(1, 'x'))`,
		`CREATE PUBLICATION it_pub FOR TABLE t_enum, t_dom, t_comp`)
	vars := e.baseVars()
	vars["CDC_VALUE_FORMAT"] = "json-with-schema"
	p := e.startCDC(vars)
	tables := []string{"public.t_enum", "public.t_dom", "public.t_comp"}
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), tables...)
	db := testenv.Conn(t, e.pgURL)
	conns := func() int {
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'tidemark' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// settled waits until the count stops moving (connections of a restart that end).
	settled := func() int {
		last, same := -1, 0
		for same < 10 {
			n := conns()
			if n == last {
				same++
			} else {
				last, same = n, 0
			}
			time.Sleep(200 * time.Millisecond)
		}
		return last
	}
	before := settled()
	// Each added table brings a type the catalog has not loaded: a load each.
	for i := range 3 {
		table := fmt.Sprintf("t_new%d", i)
		e.exec(fmt.Sprintf(`CREATE TYPE kind%d AS ENUM ('a', 'b')`, i),
			fmt.Sprintf(`CREATE DOMAIN small%d AS int CHECK (VALUE < 100)`, i),
			fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, k kind%d, s small%d)`, table, i, i),
			fmt.Sprintf(`INSERT INTO %s VALUES (1, 'a', 1)`, table),
			fmt.Sprintf(`ALTER PUBLICATION it_pub ADD TABLE %s`, table))
		tables = append(tables, "public."+table)
		e.waitFor(p, 2*time.Minute, e.currentLSN(context.Background()), tables...)
		e.exec(fmt.Sprintf(`INSERT INTO %s VALUES (2, 'b', 2)`, table))
		e.waitFor(p, 2*time.Minute, e.currentLSN(context.Background()), tables...)
	}
	after := settled()
	t.Logf("cdc's connections to the source (application_name tidemark): %d before 3 tables with new types were added, %d after", before, after)
	if after > before {
		t.Errorf("cdc holds %d connections after 3 tables with new types were added, %d before: they leak", after, before)
	}
	if done, err := p.exited(); done {
		t.Fatalf("cdc exited: %v", err)
	}
}
