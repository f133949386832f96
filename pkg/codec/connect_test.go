package codec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format/connectjson/connectcheck"
)

// Test user types, as QueryTypes would read them.
var testTypes = []TypeInfo{
	{OID: 16500, Schema: "public", Name: "mood", Type: 'e', Category: 'E', Labels: []string{"sad", "ok", "happy"}, BaseMod: -1},
	{OID: 16501, Schema: "public", Name: "posint", Type: 'd', Category: 'N', Base: pgtype.Int4OID, BaseMod: -1},
	{OID: 16502, Schema: "public", Name: "addr", Type: 'c', Category: 'C', BaseMod: -1, Fields: []change.Column{
		{Name: "street", TypeOID: pgtype.TextOID, TypeMod: -1},
		{Name: "zip", TypeOID: pgtype.Int4OID, TypeMod: -1},
		{Name: "tags", TypeOID: pgtype.TextArrayOID, TypeMod: -1},
		{Name: "price", TypeOID: pgtype.NumericOID, TypeMod: 10<<16 | 2 + 4},
	}},
	{OID: 16503, Schema: "public", Name: "_mood", Type: 'b', Category: 'A', Elem: 16500, BaseMod: -1},
	{OID: 16504, Schema: "public", Name: "_addr", Type: 'b', Category: 'A', Elem: 16502, BaseMod: -1},
	{OID: 16505, Schema: "public", Name: "price", Type: 'd', Category: 'N', Base: pgtype.NumericOID, BaseMod: 8<<16 | 3 + 4},
	{OID: 16506, Schema: "public", Name: "floatrange", Type: 'r', Category: 'R', Subtype: pgtype.Float8OID, BaseMod: -1},
	{OID: 16507, Schema: "public", Name: "citext", Type: 'b', Category: 'S', BaseMod: -1},
	{OID: 16508, Schema: "public", Name: "hstore", Type: 'b', Category: 'U', BaseMod: -1},
	{OID: 16509, Schema: "public", Name: "ltree", Type: 'b', Category: 'U', BaseMod: -1},
	{OID: 791, Schema: "pg_catalog", Name: "_money", Type: 'b', Category: 'A', Elem: 790 /* money */, BaseMod: -1},
}

func testCatalog(tb testing.TB) *Types {
	tb.Helper()
	return NewTypes(func(_ context.Context, oids []uint32) ([]TypeInfo, error) {
		var out []TypeInfo
		for _, o := range oids {
			for _, ti := range testTypes {
				if ti.OID == o {
					out = append(out, ti)
				}
			}
		}
		return out, nil
	})
}

// kitchenTable has a column of every type family.
func kitchenTable() *change.Table {
	numeric := func(p, s int32) int32 { return p<<16 | (s & 0x7ff) + 4 }
	cols := []change.Column{
		{Name: "id", TypeOID: pgtype.Int4OID, TypeMod: -1, Key: true},
		{Name: "b", TypeOID: pgtype.BoolOID, TypeMod: -1},
		{Name: "i2", TypeOID: pgtype.Int2OID, TypeMod: -1},
		{Name: "i8", TypeOID: pgtype.Int8OID, TypeMod: -1},
		{Name: "o", TypeOID: pgtype.OIDOID, TypeMod: -1},
		{Name: "f4", TypeOID: pgtype.Float4OID, TypeMod: -1},
		{Name: "f8", TypeOID: pgtype.Float8OID, TypeMod: -1},
		{Name: "n", TypeOID: pgtype.NumericOID, TypeMod: -1},
		{Name: "n102", TypeOID: pgtype.NumericOID, TypeMod: numeric(10, 2)},
		{Name: "nneg", TypeOID: pgtype.NumericOID, TypeMod: numeric(5, -2)},
		{Name: "m", TypeOID: 790 /* money */, TypeMod: -1},
		{Name: "t", TypeOID: pgtype.TextOID, TypeMod: -1},
		{Name: "c", TypeOID: pgtype.BPCharOID, TypeMod: 9},
		{Name: "by", TypeOID: pgtype.ByteaOID, TypeMod: -1},
		{Name: "bit1", TypeOID: pgtype.BitOID, TypeMod: 1},
		{Name: "bit10", TypeOID: pgtype.BitOID, TypeMod: 10},
		{Name: "vb", TypeOID: pgtype.VarbitOID, TypeMod: -1},
		{Name: "u", TypeOID: pgtype.UUIDOID, TypeMod: -1},
		{Name: "d", TypeOID: pgtype.DateOID, TypeMod: -1},
		{Name: "tm", TypeOID: pgtype.TimeOID, TypeMod: -1},
		{Name: "tm3", TypeOID: pgtype.TimeOID, TypeMod: 3},
		{Name: "ttz", TypeOID: pgtype.TimetzOID, TypeMod: -1},
		{Name: "ts", TypeOID: pgtype.TimestampOID, TypeMod: -1},
		{Name: "ts3", TypeOID: pgtype.TimestampOID, TypeMod: 3},
		{Name: "tstz", TypeOID: pgtype.TimestamptzOID, TypeMod: -1},
		{Name: "iv", TypeOID: pgtype.IntervalOID, TypeMod: -1},
		{Name: "j", TypeOID: pgtype.JSONOID, TypeMod: -1},
		{Name: "jb", TypeOID: pgtype.JSONBOID, TypeMod: -1},
		{Name: "x", TypeOID: pgtype.XMLOID, TypeMod: -1},
		{Name: "inet", TypeOID: pgtype.InetOID, TypeMod: -1},
		{Name: "mac", TypeOID: pgtype.MacaddrOID, TypeMod: -1},
		{Name: "pt", TypeOID: pgtype.PointOID, TypeMod: -1},
		{Name: "ln", TypeOID: pgtype.LineOID, TypeMod: -1},
		{Name: "ls", TypeOID: pgtype.LsegOID, TypeMod: -1},
		{Name: "bx", TypeOID: pgtype.BoxOID, TypeMod: -1},
		{Name: "pa", TypeOID: pgtype.PathOID, TypeMod: -1},
		{Name: "pg", TypeOID: pgtype.PolygonOID, TypeMod: -1},
		{Name: "ci", TypeOID: pgtype.CircleOID, TypeMod: -1},
		{Name: "tsv", TypeOID: pgtype.TSVectorOID, TypeMod: -1},
		{Name: "tsq", TypeOID: 3615 /* tsquery */, TypeMod: -1},
		{Name: "r", TypeOID: pgtype.Int4rangeOID, TypeMod: -1},
		{Name: "mr", TypeOID: pgtype.Int4multirangeOID, TypeMod: -1},
		{Name: "ia", TypeOID: pgtype.Int4ArrayOID, TypeMod: -1},
		{Name: "ia2", TypeOID: pgtype.Int4ArrayOID, TypeMod: -1},
		{Name: "na", TypeOID: pgtype.NumericArrayOID, TypeMod: numeric(6, 1)},
		{Name: "ma", TypeOID: 791, TypeMod: -1},
		{Name: "mood", TypeOID: 16500, TypeMod: -1},
		{Name: "moods", TypeOID: 16503, TypeMod: -1},
		{Name: "pi", TypeOID: 16501, TypeMod: -1},
		{Name: "pr", TypeOID: 16505, TypeMod: -1},
		{Name: "addr", TypeOID: 16502, TypeMod: -1},
		{Name: "addrs", TypeOID: 16504, TypeMod: -1},
		{Name: "fr", TypeOID: 16506, TypeMod: -1},
		{Name: "ct", TypeOID: 16507, TypeMod: -1},
	}
	return &change.Table{Export: change.ExportID{Schema: "public", Table: "kitchen"}, OID: 16600, Columns: cols}
}

var kitchenRow = map[string]string{
	"id": "1", "b": "t", "i2": "-7", "i8": "9007199254740993", "o": "4294967295", "f4": "1.5", "f8": "-1e+100",
	"n": "-12.3400", "n102": "12345678.90", "nneg": "12300", "m": "-$1,234.56", "t": "tab\there \"q\"", "c": "padded   ",
	"by": `\xdeadbeef`, "bit1": "1", "bit10": "1000000001", "vb": "101", "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
	"d": "2024-01-31", "tm": "12:34:56.5", "tm3": "23:59:59.999", "ttz": "12:34:56.5+05:30",
	"ts": "2024-01-31 12:34:56.123456", "ts3": "0044-03-15 12:00:00 BC", "tstz": "2024-01-31 12:34:56.5+00",
	"iv": "1 year 2 mons -3 days +04:05:06.7", "j": `null`, "jb": `{"a": [1, 2]}`, "x": "<a>b</a>",
	"inet": "192.168.0.1/24", "mac": "08:00:2b:01:02:03", "pt": "(1.5,-2)", "ln": "{1,-1,0}", "ls": "[(0,0),(1,1)]",
	"bx": "(2,2),(0,0)", "pa": "[(0,0),(1,1),(2,0)]", "pg": "((0,0),(1,1),(1,0))", "ci": "<(1,2),3>",
	"tsv": "'a' 'fat':2", "tsq": "'fat' & 'rat'", "r": "[1,10)", "mr": "{[1,3),[5,7)}",
	"ia": "{1,NULL,3}", "ia2": "[0:1][1:2]={{1,2},{3,4}}", "na": "{1.5,NULL,-2.0}", "ma": "{$1.00,-$2.50}",
	"mood": "happy", "moods": "{sad,NULL,ok}", "pi": "42", "pr": "3.140", "addr": `("1 Main St, ""A""",12345,"{x,""y z""}",9.99)`,
	"addrs": `{"(a,1,{},1.00)",NULL,"(,,,)"}`, "fr": "[1.5,2.5)", "ct": "MiXeD",
}

func kitchenValues(t *change.Table) [][]byte {
	out := make([][]byte, len(t.Columns))
	for i, c := range t.Columns {
		v, ok := kitchenRow[c.Name]
		if !ok {
			panic("no value for " + c.Name)
		}
		out[i] = []byte(v)
	}
	return out
}

func newConnectEncoder(tb testing.TB, tbl *change.Table, tombstones bool) *Encoder {
	tb.Helper()
	t := struct{ Context func() context.Context }{context.Background}
	cfg := Config{
		Database: "shop", TopicPrefix: "tm", Tombstones: tombstones, Format: FormatJSONWithSchema,
		Types: testCatalog(tb), Now: func() time.Time { return fixedNow },
	}
	if err := cfg.Prepare(t.Context(), tbl); err != nil {
		tb.Fatalf("ResolveTable: %v", err)
	}
	e, err := NewEncoder(cfg, tbl)
	if err != nil {
		tb.Fatalf("NewEncoder: %v", err)
	}
	return e
}

// TestConnectGolden pins the json-with-schema records of a row with every type family, and
// checks each record's payload against its own schema the way a strict reader would.
func TestConnectGolden(t *testing.T) {
	tbl := kitchenTable()
	e := newConnectEncoder(t, tbl, true)
	row := kitchenValues(tbl)
	keyOnly := make([][]byte, len(row))
	keyOnly[0] = row[0]
	moved := append([][]byte(nil), row...)
	moved[0] = []byte("2")
	cases := []struct {
		name   string
		encode func() ([]change.Record, error)
	}{
		{"connect_read", func() ([]change.Record, error) {
			return e.Read(nil, Source{LSN: 0x16B4A1F, Seq: 1, Snapshot: true, Attempt: 1, Time: fixedNow}, row)
		}},
		{"connect_delete", func() ([]change.Record, error) { return e.Delete(nil, txSource, keyOnly) }},
		{"connect_update_key_change", func() ([]change.Record, error) { return e.Update(nil, txSource, row, moved, nil) }},
		{"connect_truncate", func() ([]change.Record, error) { return e.Truncate(nil, txSource) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recs, err := tc.encode()
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range recs {
				for _, b := range [][]byte{r.Key, r.Value} {
					if b != nil {
						checkConnectJSON(t, b)
					}
				}
			}
			checkGolden(t, tc.name, dumpConnect(t, recs))
		})
	}
	// The schemas once, indented.
	recs, err := e.Read(nil, Source{}, row)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, j := range [][]byte{recs[0].Key, recs[0].Value} {
		var env struct{ Schema json.RawMessage }
		if err := json.Unmarshal(j, &env); err != nil {
			t.Fatal(err)
		}
		if err := json.Indent(&b, env.Schema, "", "  "); err != nil {
			t.Fatal(err)
		}
		b.WriteString("\n")
	}
	checkGolden(t, "connect_schema", b.Bytes())
}

// dumpConnect is dumpRecords with only the payloads of keys and values (the schemas are pinned
// once by connect_schema.golden).
func dumpConnect(tb testing.TB, recs []change.Record) []byte {
	tb.Helper()
	strip := func(j []byte) []byte {
		if j == nil {
			return nil
		}
		var env struct{ Payload json.RawMessage }
		if err := json.Unmarshal(j, &env); err != nil {
			tb.Fatal(err)
		}
		return env.Payload
	}
	out := make([]change.Record, len(recs))
	for i, r := range recs {
		out[i] = r
		out[i].Key, out[i].Value = strip(r.Key), strip(r.Value)
	}
	return dumpRecords(tb, out)
}

// checkConnectJSON checks that b is {"schema":..,"payload":..} and that the payload matches the
// schema exactly: every JSON type as the schema says, required fields present, no unknown fields,
// bytes valid base64.
func checkConnectJSON(tb testing.TB, b []byte) {
	tb.Helper()
	if err := connectcheck.Check(b); err != nil {
		tb.Fatalf("%v\n%s", err, b)
	}
}

func TestConnectRefusalNamesTheColumn(t *testing.T) {
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "f"}, Columns: []change.Column{
		{Name: "id", TypeOID: pgtype.Int4OID, TypeMod: -1, Key: true},
		{Name: "v", TypeOID: pgtype.Float8OID, TypeMod: -1},
	}}
	e := newConnectEncoder(t, tbl, false)
	_, err := e.Insert(nil, txSource, row("1", "NaN"))
	if !errors.Is(err, ErrNotRepresentable) || !strings.Contains(err.Error(), `"v"`) {
		t.Fatalf("got %v, want ErrNotRepresentable naming column v", err)
	}
}

func TestConnectUnknownTypeRefused(t *testing.T) {
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "u"}, Columns: []change.Column{
		{Name: "v", TypeOID: 99999, TypeMod: -1},
	}}
	_, err := NewEncoder(Config{Format: FormatJSONWithSchema}, tbl)
	if err == nil {
		t.Fatal("encoder built for an unresolved type")
	}
}

// TestConnectDeleteKey: a reconcile delete of a key read back from the topic has the key's
// payload as before, in a value that matches its schema.
func TestConnectDeleteKey(t *testing.T) {
	tbl := kitchenTable()
	e := newConnectEncoder(t, tbl, true)
	recs, err := e.Read(nil, Source{}, kitchenValues(tbl)) // leaves array dims behind
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range [][]byte{recs[0].Key, []byte(`{"id":1}`)} {
		del := e.DeleteKey(nil, Source{LSN: 0x10, Snapshot: true, Attempt: 2}, key)
		if len(del) != 2 || del[1].Value != nil || !bytes.Equal(del[0].Key, key) {
			t.Fatalf("got %d records", len(del))
		}
		checkConnectJSON(t, del[0].Value)
		var v struct {
			Payload struct {
				Before map[string]json.RawMessage
				Op     string
			}
		}
		if err := json.Unmarshal(del[0].Value, &v); err != nil {
			t.Fatal(err)
		}
		if string(v.Payload.Before["id"]) != "1" || v.Payload.Op != "d" {
			t.Fatalf("before %v op %s", v.Payload.Before, v.Payload.Op)
		}
		for _, h := range del[0].Headers {
			if h.Key == HeaderArrayDims {
				t.Fatalf("stale %s header: %s", h.Key, h.Value)
			}
		}
	}
}
