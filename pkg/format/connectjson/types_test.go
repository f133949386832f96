package connectjson

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
)

// TestTypesResolve: a table's user types are read with everything they refer to, each OID once;
// built-in types are never read.
func TestTypesResolve(t *testing.T) {
	var asked [][]uint32
	types := format.NewTypes(func(_ context.Context, oids []uint32) ([]format.TypeInfo, error) {
		asked = append(asked, slices.Clone(oids))
		var out []format.TypeInfo
		for _, o := range oids {
			for _, ti := range testTypes {
				if ti.OID == o {
					out = append(out, ti)
				}
			}
		}
		return out, nil
	})
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "t"}, Columns: []change.Column{
		{Name: "id", TypeOID: pgtype.Int4OID, TypeMod: -1},
		{Name: "addrs", TypeOID: 16504, TypeMod: -1}, // _addr -> addr -> text[], numeric
		{Name: "ts", TypeOID: pgtype.TimestamptzArrayOID, TypeMod: -1},
	}}
	for range 2 {
		if err := types.ResolveTable(t.Context(), tbl, StaticType); err != nil {
			t.Fatal(err)
		}
	}
	if want := [][]uint32{{16504}, {16502}}; !slices.EqualFunc(asked, want, slices.Equal) {
		t.Fatalf("asked for %v, want %v", asked, want)
	}
	if _, err := buildNode(types, 16504, -1, 0); err != nil {
		t.Fatal(err)
	}

	err := types.Resolve(t.Context(), []uint32{99999}, StaticType)
	if err == nil || !strings.Contains(err.Error(), "99999") {
		t.Fatalf("missing type: got %v", err)
	}
	if err := format.NewTypes(nil).Resolve(t.Context(), []uint32{16500}, StaticType); err == nil {
		t.Fatal("resolved a user type without a loader")
	}
}
