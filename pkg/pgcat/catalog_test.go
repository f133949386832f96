package pgcat

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
)

// connectTest connects to a fresh database of the shared server through Connect.
func connectTest(t *testing.T) (*Conn, string) {
	t.Helper()
	url := testenv.NewDB(t)
	conn, err := Connect(t.Context(), url, Timeouts{})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(t.Context()) })
	return conn, url
}

func execTest(t *testing.T, q Querier, sql string) {
	t.Helper()
	if _, err := q.Exec(t.Context(), sql); err != nil {
		t.Fatalf("exec %.80s: %v", sql, err)
	}
}

func TestConnect(t *testing.T) {
	conn, _ := connectTest(t)
	var tz, app string
	if err := conn.QueryRow(t.Context(), `SELECT current_setting('TimeZone'), current_setting('application_name')`).Scan(&tz, &app); err != nil {
		t.Fatal(err)
	}
	if tz != "UTC" || app != "tidemark" {
		t.Errorf("TimeZone %q, application_name %q; want UTC, tidemark", tz, app)
	}
	if db, err := Database(t.Context(), conn); err != nil || !strings.HasPrefix(db, "tidemark_") {
		t.Errorf("Database = %q, %v", db, err)
	}
	if lsn, err := CurrentWAL(t.Context(), conn); err != nil || lsn == 0 {
		t.Errorf("CurrentWAL = %s, %v", lsn, err)
	}
	if lsn, err := CurrentWAL(t.Context(), conn); err == nil {
		if end, standby, err := WALEnd(t.Context(), conn); err != nil || standby || end < lsn {
			t.Errorf("WALEnd = %s, standby %v, %v; want a primary's, at or past CurrentWAL's %s", end, standby, err, lsn)
		}
	}
	if ServerMajor(conn.PgConn().ParameterStatus("server_version")) < 10 {
		t.Errorf("ServerMajor of %q", conn.PgConn().ParameterStatus("server_version"))
	}

	_, err := Connect(t.Context(), "postgres://u:hunter2secret@localhost:notaport/db", Timeouts{})
	if !errors.Is(err, ErrConfig) || strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("unparsable URL: %v; want ErrConfig without the password", err)
	}
}

// TestQuoteRoundTrip has the server read back what Ident and Literal render, under both
// settings of standard_conforming_strings.
func TestQuoteRoundTrip(t *testing.T) {
	conn, _ := connectTest(t)
	values := []string{"plain", "it's", `back\slash`, `\'; SELECT 1; --`, `"quoted"`, "Ünïcode", ""}
	for _, scs := range []string{"on", "off"} {
		execTest(t, conn, "SET standard_conforming_strings = "+scs)
		for _, v := range values {
			var got string
			if err := conn.QueryRow(t.Context(), "SELECT "+Literal(v)).Scan(&got); err != nil || got != v {
				t.Errorf("standard_conforming_strings=%s: SELECT %s = %q, %v; want %q", scs, Literal(v), got, err, v)
			}
		}
	}
	for _, name := range []string{"user", `We"ird Name`, "select"} {
		execTest(t, conn, "CREATE TABLE "+Table(change.ExportID{Schema: "public", Table: name})+" ("+Ident(name)+" int)")
		var got string
		if err := conn.QueryRow(t.Context(), `SELECT attname::text FROM pg_attribute WHERE attrelid = $1::regclass AND attnum = 1`,
			Table(change.ExportID{Schema: "public", Table: name})).Scan(&got); err != nil || got != name {
			t.Errorf("column of %s = %q, %v", Ident(name), got, err)
		}
	}
}

func TestPublicationCatalog(t *testing.T) {
	conn, _ := connectTest(t)
	ctx := t.Context()
	execTest(t, conn, `CREATE TABLE "Mixed Case" (id int PRIMARY KEY, body text)`)
	execTest(t, conn, `CREATE TABLE full_row (id int PRIMARY KEY, body text)`)
	execTest(t, conn, `ALTER TABLE full_row REPLICA IDENTITY FULL`)
	execTest(t, conn, `CREATE TABLE keyless (v int)`)
	execTest(t, conn, `CREATE TABLE parted (id int PRIMARY KEY, n int) PARTITION BY RANGE (id)`)
	execTest(t, conn, `CREATE TABLE parted_a PARTITION OF parted FOR VALUES FROM (0) TO (10)`)
	execTest(t, conn, `CREATE TABLE parted_b PARTITION OF parted FOR VALUES FROM (10) TO (20)`)
	execTest(t, conn, `CREATE TYPE mood AS ENUM ('sad', 'ok')`)

	mixed := change.ExportID{Schema: "public", Table: "Mixed Case"}
	full := change.ExportID{Schema: "public", Table: "full_row"}
	parted := change.ExportID{Schema: "public", Table: "parted"}

	// A keyless table or a missing one is refused before anything is created.
	err := EnsurePublication(ctx, conn, "Pub", []change.ExportID{mixed, {Schema: "public", Table: "keyless"}, {Schema: "public", Table: "missing"}})
	if !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), "keyless") || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("EnsurePublication with a keyless and a missing table: %v; want ErrSetup naming both", err)
	}
	if err := EnsurePublication(ctx, conn, "Pub", nil); !errors.Is(err, ErrSetup) {
		t.Fatalf("EnsurePublication without tables nor publication: %v; want ErrSetup", err)
	}
	if err := EnsurePublication(ctx, conn, "Pub", []change.ExportID{mixed}); err != nil {
		t.Fatalf("create: %v", err)
	}
	execTest(t, conn, `ALTER PUBLICATION "Pub" SET (publish_via_partition_root = true)`)
	// A second call adds what is missing and keeps what is there.
	if err := EnsurePublication(ctx, conn, "Pub", []change.ExportID{mixed, full, parted}); err != nil {
		t.Fatalf("add: %v", err)
	}
	published, err := PublishedTables(ctx, conn, "Pub")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []change.ExportID{mixed, full, parted} {
		if _, ok := published[e]; !ok || len(published) != 3 {
			t.Errorf("PublishedTables = %v; want %s, %s and %s", published, mixed, full, parted)
		}
	}

	leaves, err := PartitionLeaves(ctx, conn, "Pub")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(leaves[parted], ","); len(leaves) != 1 || len(got) != 2 {
		t.Errorf("PartitionLeaves = %v; want two leaves of %s", leaves, parted)
	}

	toast, err := OutOfLineColumns(ctx, conn, "Pub")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := toast[full]; ok || !slices.Equal(toast[mixed], []string{"body"}) {
		t.Errorf("OutOfLineColumns = %v; want body of %s only (%s has replica identity FULL)", toast, mixed, full)
	}

	tbl, err := LoadTable(ctx, conn, "Pub", mixed)
	if err != nil || len(tbl.Columns) != 2 || !tbl.Columns[0].Key || tbl.Columns[1].Key {
		t.Errorf("LoadTable(%s) = %+v, %v", mixed, tbl, err)
	}

	var moodOID uint32
	if err := conn.QueryRow(ctx, `SELECT 'mood'::regtype::oid`).Scan(&moodOID); err != nil {
		t.Fatal(err)
	}
	types, err := QueryTypes(ctx, conn, []uint32{moodOID})
	if err != nil || len(types) != 1 || types[0].Type != 'e' || !slices.Equal(types[0].Labels, []string{"sad", "ok"}) {
		t.Errorf("QueryTypes(mood) = %+v, %v", types, err)
	}
}

// TestLoadTables: many tables in one call give what LoadTable gives for each, and a table that
// cannot be loaded has its own error without failing the others.
func TestLoadTables(t *testing.T) {
	conn, _ := connectTest(t)
	ctx := t.Context()
	execTest(t, conn, `CREATE TABLE keyed (id int, k2 text, v text, g int GENERATED ALWAYS AS (id * 2) STORED, PRIMARY KEY (k2, id))`)
	execTest(t, conn, `ALTER TABLE keyed DROP COLUMN v`)
	execTest(t, conn, `CREATE TABLE ident (a int NOT NULL, b int NOT NULL, c text)`)
	execTest(t, conn, `CREATE UNIQUE INDEX ident_b ON ident (b)`)
	execTest(t, conn, `ALTER TABLE ident REPLICA IDENTITY USING INDEX ident_b`)
	execTest(t, conn, `CREATE TABLE nokey (a int)`)
	execTest(t, conn, `CREATE TABLE listed (id int PRIMARY KEY, x int, y int)`)
	execTest(t, conn, `CREATE VIEW v AS SELECT 1 AS one`)
	execTest(t, conn, `CREATE PUBLICATION p FOR TABLE keyed, ident, nokey, listed (id, y)`)
	id := func(name string) change.ExportID { return change.ExportID{Schema: "public", Table: name} }
	exports := []change.ExportID{id("keyed"), id("ident"), id("nokey"), id("listed"), id("v"), id("missing")}
	tables, errs, err := LoadTables(ctx, conn, "p", exports)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exports[:4] {
		one, err := LoadTable(ctx, conn, "p", e)
		if err != nil {
			t.Fatalf("LoadTable(%s): %v", e, err)
		}
		if got := fmt.Sprintf("%+v", tables[e]); got != fmt.Sprintf("%+v", one) || errs[e] != nil {
			t.Errorf("LoadTables[%s] = %s, %v; LoadTable gives %+v", e, got, errs[e], one)
		}
	}
	if got := tables[id("keyed")].KeyColumns(); len(got) != 2 || len(tables[id("keyed")].Columns) != 2 {
		t.Errorf("keyed: columns %+v; want id and k2, both key (v dropped, g generated)", tables[id("keyed")].Columns)
	}
	if cols := tables[id("ident")].Columns; len(cols) != 3 || cols[0].Key || !cols[1].Key || cols[2].Key {
		t.Errorf("ident: columns %+v; want b alone as key", cols)
	}
	if cols := tables[id("listed")].Columns; len(cols) != 2 || cols[1].Name != "y" {
		t.Errorf("listed: columns %+v; want id and y (the column list)", cols)
	}
	if !errors.Is(errs[id("v")], ErrUnsupportedTable) || !errors.Is(errs[id("missing")], ErrTableNotFound) {
		t.Errorf("errors: view %v, missing %v; want ErrUnsupportedTable and ErrTableNotFound", errs[id("v")], errs[id("missing")])
	}
}
