package snapshot

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
)

func TestLoadTable(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	q := func(table string) string { return pgcat.Ident(schema) + "." + pgcat.Ident(table) }
	execTest(t, conn, "CREATE TABLE "+q("pk")+` (a int, "B c" text, gone int, g int GENERATED ALWAYS AS (a * 2) STORED, d numeric(10,2), PRIMARY KEY ("B c", a))`)
	execTest(t, conn, "ALTER TABLE "+q("pk")+" DROP COLUMN gone")
	execTest(t, conn, "CREATE TABLE "+q("idx")+" (id int PRIMARY KEY, u text NOT NULL, v varchar(12))")
	execTest(t, conn, "CREATE UNIQUE INDEX idx_u ON "+q("idx")+" (u)")
	execTest(t, conn, "ALTER TABLE "+q("idx")+" REPLICA IDENTITY USING INDEX idx_u")
	execTest(t, conn, "CREATE TABLE "+q("full_pk")+" (id int PRIMARY KEY, v text)")
	execTest(t, conn, "ALTER TABLE "+q("full_pk")+" REPLICA IDENTITY FULL")
	execTest(t, conn, "CREATE TABLE "+q("full_nopk")+" (id int, v text)")
	execTest(t, conn, "ALTER TABLE "+q("full_nopk")+" REPLICA IDENTITY FULL")
	execTest(t, conn, "CREATE TABLE "+q("nothing")+" (id int PRIMARY KEY, v text)")
	execTest(t, conn, "ALTER TABLE "+q("nothing")+" REPLICA IDENTITY NOTHING")
	execTest(t, conn, "CREATE TABLE "+q("nokey")+" (v text)")
	execTest(t, conn, "CREATE VIEW "+q("view")+" AS SELECT 1 AS x")

	tests := []struct {
		name     string
		table    string
		wantCols []string
		wantKeys []string
		wantErr  error
	}{
		{name: "primary key, generated and dropped columns left out", table: "pk", wantCols: []string{"a", "B c", "d"}, wantKeys: []string{"a", "B c"}},
		{name: "replica identity index", table: "idx", wantCols: []string{"id", "u", "v"}, wantKeys: []string{"u"}},
		{name: "full with primary key", table: "full_pk", wantCols: []string{"id", "v"}, wantKeys: []string{"id"}},
		{name: "full without primary key", table: "full_nopk", wantCols: []string{"id", "v"}},
		{name: "nothing", table: "nothing", wantCols: []string{"id", "v"}},
		{name: "no key", table: "nokey", wantCols: []string{"v"}},
		{name: "missing", table: "missing", wantErr: pgcat.ErrTableNotFound},
		{name: "view", table: "view", wantErr: pgcat.ErrUnsupportedTable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pgcat.LoadTable(t.Context(), conn, "", change.ExportID{Schema: schema, Table: tt.table})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("LoadTable error = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadTable: %v", err)
			}
			var cols, keys []string
			for _, c := range got.Columns {
				cols = append(cols, c.Name)
				if c.Key {
					keys = append(keys, c.Name)
				}
				if c.TypeOID == 0 {
					t.Fatalf("column %s has no type", c.Name)
				}
			}
			if !slices.Equal(cols, tt.wantCols) || !slices.Equal(keys, tt.wantKeys) {
				t.Fatalf("columns %q keys %q, want %q and %q", cols, keys, tt.wantCols, tt.wantKeys)
			}
			if got.OID == 0 || got.Export.Table != tt.table {
				t.Fatalf("table %+v", got)
			}
		})
	}

	got, err := pgcat.LoadTable(t.Context(), conn, "", change.ExportID{Schema: schema, Table: "idx"})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Columns[2]; v.TypeOID != 1043 || v.TypeMod != 12+4 {
		t.Fatalf("varchar(12) column: oid %d typmod %d, want 1043 and 16", v.TypeOID, v.TypeMod)
	}
	if id := got.Columns[0]; id.TypeOID != 23 || id.TypeMod != -1 {
		t.Fatalf("int column: oid %d typmod %d, want 23 and -1", id.TypeOID, id.TypeMod)
	}
}

// TestLoadTablePublished: a publication's column list and row filter shape the table LoadTable
// returns; a list that leaves out a key column is refused; PublishedAs reads the same.
func TestLoadTablePublished(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	q := func(table string) string { return pgcat.Ident(schema) + "." + pgcat.Ident(table) }
	pub := "Pub " + schema
	execTest(t, conn, "CREATE TABLE "+q("people")+" (id int NOT NULL, name text, region text NOT NULL, ssn text)")
	execTest(t, conn, "CREATE UNIQUE INDEX ON "+q("people")+" (id, region)")
	execTest(t, conn, "ALTER TABLE "+q("people")+" REPLICA IDENTITY USING INDEX "+pgcat.Ident("people_id_region_idx"))
	execTest(t, conn, "CREATE TABLE "+q("nokey")+" (id int PRIMARY KEY, v text)")
	execTest(t, conn, "CREATE TABLE "+q("plain")+" (id int PRIMARY KEY, v text)")
	execTest(t, conn, "CREATE PUBLICATION "+pgcat.Ident(pub)+" FOR TABLE "+q("people")+" (id, name, region) WHERE (region = 'eu'), "+
		q("plain"))
	execTest(t, conn, "CREATE PUBLICATION "+pgcat.Ident(pub+" ins")+" FOR TABLE "+q("nokey")+" (v) WITH (publish = 'insert')")
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP PUBLICATION IF EXISTS "+pgcat.Ident(pub)+", "+pgcat.Ident(pub+" ins"))
	})

	people := change.ExportID{Schema: schema, Table: "people"}
	got, err := pgcat.LoadTable(t.Context(), conn, pub, people)
	if err != nil {
		t.Fatal(err)
	}
	var cols, keys []string
	for _, c := range got.Columns {
		cols = append(cols, c.Name)
		if c.Key {
			keys = append(keys, c.Name)
		}
	}
	if want := []string{"id", "name", "region"}; !slices.Equal(cols, want) || !slices.Equal(keys, []string{"id", "region"}) {
		t.Errorf("columns %q keys %q, want %q and [id region]", cols, keys, want)
	}
	if got.Published.RowFilter != "(region = 'eu'::text)" || !slices.Equal(got.Published.Columns, []int16{1, 2, 3}) {
		t.Errorf("published as %+v, want columns 1-3 and the filter", got.Published)
	}
	all, err := pgcat.LoadTable(t.Context(), conn, "", people)
	if err != nil || len(all.Columns) != 4 || all.Published.RowFilter != "" {
		t.Errorf("without a publication: %+v, %v; want 4 columns and no filter", all, err)
	}
	plain, err := pgcat.LoadTable(t.Context(), conn, pub, change.ExportID{Schema: schema, Table: "plain"})
	if err != nil || len(plain.Columns) != 2 || plain.Published.Columns != nil || plain.Published.RowFilter != "" {
		t.Errorf("table without a list or filter: %+v, %v", plain, err)
	}

	_, err = pgcat.LoadTable(t.Context(), conn, pub+" ins", change.ExportID{Schema: schema, Table: "nokey"})
	if !errors.Is(err, pgcat.ErrUnsupportedTable) || !strings.Contains(err.Error(), "leaves out the key column(s) id") {
		t.Errorf("column list without the key: %v, want pgcat.ErrUnsupportedTable naming id", err)
	}

	polled, err := pgcat.PublishedAs(t.Context(), conn, pub)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := polled[people]; !ok || p.Digest() != got.Published.Digest() || !slices.Equal(p.Names, []string{"id", "name", "region"}) {
		t.Errorf("PublishedAs: %+v, want %+v", polled, got.Published)
	}
	if len(polled) != 1 {
		t.Errorf("PublishedAs lists %d tables, want only people", len(polled))
	}
	execTest(t, conn, "ALTER PUBLICATION "+pgcat.Ident(pub)+" SET TABLE "+q("people")+" (id, name, region) WHERE (region <> 'us'), "+q("plain"))
	polled, err = pgcat.PublishedAs(t.Context(), conn, pub)
	if err != nil {
		t.Fatal(err)
	}
	if polled[people].Digest() == got.Published.Digest() {
		t.Errorf("a changed filter compares equal: %+v", polled[people])
	}
}
