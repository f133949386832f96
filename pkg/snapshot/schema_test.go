package snapshot

import (
	"errors"
	"slices"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
)

func TestLoadTable(t *testing.T) {
	url := testPGURL(t)
	conn := connectTest(t, url)
	schema := testSchema(t, conn)
	q := func(table string) string { return quoteIdent(schema) + "." + quoteIdent(table) }
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
		{name: "missing", table: "missing", wantErr: ErrTableNotFound},
		{name: "view", table: "view", wantErr: ErrUnsupportedTable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadTable(t.Context(), conn, change.ExportID{Schema: schema, Table: tt.table})
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

	got, err := LoadTable(t.Context(), conn, change.ExportID{Schema: schema, Table: "idx"})
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
