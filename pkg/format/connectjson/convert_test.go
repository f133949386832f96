package connectjson

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/connectjson/connectcheck"
)

// Test user types, as QueryTypes would read them.
var testTypes = []format.TypeInfo{
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
	{OID: 791, Schema: "pg_catalog", Name: "_money", Type: 'b', Category: 'A', Elem: moneyOID, BaseMod: -1},
}

func testCatalog(tb testing.TB) *format.Types {
	tb.Helper()
	return format.NewTypes(func(_ context.Context, oids []uint32) ([]format.TypeInfo, error) {
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
}

func TestConnectValues(t *testing.T) {
	b64 := func(b ...byte) string { return `"` + base64.StdEncoding.EncodeToString(b) + `"` }
	numeric := func(p, s int32) int32 { return p<<16 | (s & 0x7ff) + 4 }
	cases := []struct {
		name string
		oid  uint32
		mod  int32
		text string
		want string // "" with fail
		fail bool
	}{
		{name: "decimal positive", oid: pgtype.NumericOID, mod: numeric(10, 2), text: "1.50", want: b64(0, 150)},
		{name: "decimal sign byte", oid: pgtype.NumericOID, mod: numeric(10, 2), text: "1.28", want: b64(0, 128)},
		{name: "decimal negative", oid: pgtype.NumericOID, mod: numeric(10, 2), text: "-1.28", want: b64(0x80)},
		{name: "decimal minus one", oid: pgtype.NumericOID, mod: numeric(10, 2), text: "-0.01", want: b64(0xff)},
		{name: "decimal zero", oid: pgtype.NumericOID, mod: numeric(10, 2), text: "0.00", want: b64(0)},
		{name: "decimal big", oid: pgtype.NumericOID, mod: numeric(30, 0), text: "-170141183460469231731687303715884105728", want: b64(0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)},
		{name: "decimal big positive", oid: pgtype.NumericOID, mod: numeric(30, 0), text: "18446744073709551615", want: b64(0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)},
		{name: "decimal negative scale", oid: pgtype.NumericOID, mod: numeric(5, -2), text: "-12300", want: b64(0x85)},
		{name: "decimal NaN", oid: pgtype.NumericOID, mod: numeric(10, 2), text: "NaN", fail: true},
		{name: "variable scale", oid: pgtype.NumericOID, mod: -1, text: "-12.340", want: `{"scale":3,"value":` + b64(0xcf, 0xcc) + `}`},
		{name: "variable scale integer", oid: pgtype.NumericOID, mod: -1, text: "7", want: `{"scale":0,"value":` + b64(7) + `}`},
		{name: "variable scale Infinity", oid: pgtype.NumericOID, mod: -1, text: "Infinity", fail: true},
		{name: "money", oid: moneyOID, mod: -1, text: "$1,000.05", want: b64(0x01, 0x86, 0xa5)},
		{name: "money other locale", oid: moneyOID, mod: -1, text: "1.000,05 €", fail: true},
		{name: "float NaN", oid: pgtype.Float8OID, mod: -1, text: "NaN", fail: true},
		{name: "float4 infinity", oid: pgtype.Float4OID, mod: -1, text: "-Infinity", fail: true},
		{name: "bit 1", oid: pgtype.BitOID, mod: 1, text: "0", want: "false"},
		{name: "bits little-endian", oid: pgtype.BitOID, mod: 10, text: "1000000001", want: b64(0x01, 0x02)},
		{name: "bits zero", oid: pgtype.VarbitOID, mod: -1, text: "000", want: `""`},
		{name: "date epoch", oid: pgtype.DateOID, mod: -1, text: "1970-01-01", want: "0"},
		{name: "date before epoch", oid: pgtype.DateOID, mod: -1, text: "1969-12-31", want: "-1"},
		{name: "date leap", oid: pgtype.DateOID, mod: -1, text: "2000-03-01", want: "11017"},
		{name: "date BC", oid: pgtype.DateOID, mod: -1, text: "0001-12-31 BC", want: "-719163"},
		{name: "date infinity", oid: pgtype.DateOID, mod: -1, text: "infinity", want: fmt.Sprint(DatePosInfinity)},
		{name: "time micro", oid: pgtype.TimeOID, mod: -1, text: "00:00:01.000001", want: "1000001"},
		{name: "time end of day", oid: pgtype.TimeOID, mod: 6, text: "24:00:00", want: "86400000000"},
		{name: "time milli", oid: pgtype.TimeOID, mod: 2, text: "00:00:01.25", want: "1250"},
		{name: "timestamp micro", oid: pgtype.TimestampOID, mod: -1, text: "2018-06-20 15:13:16.945104", want: "1529507596945104"},
		{name: "timestamp milli", oid: pgtype.TimestampOID, mod: 3, text: "1969-12-31 23:59:59.999", want: "-1"},
		{name: "timestamp infinity", oid: pgtype.TimestampOID, mod: -1, text: "infinity", want: "9223372036825200000"},
		{name: "timestamp -infinity", oid: pgtype.TimestampOID, mod: -1, text: "-infinity", want: "-9223372036832400000"},
		{name: "timestamp(3) infinity", oid: pgtype.TimestampOID, mod: 3, text: "infinity", want: "9223372036825200"},
		{name: "timestamp beyond int64 micros", oid: pgtype.TimestampOID, mod: -1, text: "294270-01-01 00:00:00", fail: true},
		{name: "timestamptz", oid: pgtype.TimestamptzOID, mod: -1, text: "2024-01-31 12:34:56+00", want: `"2024-01-31T12:34:56Z"`},
		{name: "timestamptz offset", oid: pgtype.TimestamptzOID, mod: -1, text: "2024-01-01 01:00:00.25+05:30", want: `"2023-12-31T19:30:00.25Z"`},
		{name: "timestamptz BC", oid: pgtype.TimestamptzOID, mod: -1, text: "0044-03-15 12:00:00+00 BC", want: `"-0043-03-15T12:00:00Z"`},
		{name: "timestamptz far future", oid: pgtype.TimestamptzOID, mod: -1, text: "12345-01-01 00:00:00+00", want: `"+12345-01-01T00:00:00Z"`},
		{name: "timestamptz infinity", oid: pgtype.TimestamptzOID, mod: -1, text: "-infinity", want: `"-infinity"`},
		{name: "timetz", oid: pgtype.TimetzOID, mod: -1, text: "01:00:00-02", want: `"03:00:00Z"`},
		{name: "timetz wraps", oid: pgtype.TimetzOID, mod: -1, text: "01:00:00.5+05:30", want: `"19:30:00.5Z"`},
		{name: "interval", oid: pgtype.IntervalOID, mod: -1, text: "1 year 2 mons -3 days +04:05:06.7", want: "36572706700000"},
		{name: "interval negative time", oid: pgtype.IntervalOID, mod: -1, text: "-00:00:01.5", want: "-1500000"},
		{name: "interval days", oid: pgtype.IntervalOID, mod: -1, text: "3 days", want: "259200000000"},
		{name: "json null is a document", oid: pgtype.JSONBOID, mod: -1, text: "null", want: `"null"`},
		{name: "uuid", oid: pgtype.UUIDOID, mod: -1, text: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", want: `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{name: "point", oid: pgtype.PointOID, mod: -1, text: "(1,2)", want: `{"x":1,"y":2,"wkb":"AQEAAAAAAAAAAADwPwAAAAAAAABA","srid":null}`},
		{name: "point NaN", oid: pgtype.PointOID, mod: -1, text: "(NaN,2)", fail: true},
		{name: "empty array", oid: pgtype.TextArrayOID, mod: -1, text: "{}", want: `[]`},
		{name: "domain over numeric", oid: 16505, mod: -1, text: "3.1", want: b64(0x0c, 0x1c)},
		{name: "enum", oid: 16500, mod: -1, text: "ok", want: `"ok"`},
		{name: "composite with nulls", oid: 16502, mod: -1, text: "(,,,)", want: `{"street":null,"zip":null,"tags":null,"price":null}`},
		{name: "composite empty string", oid: 16502, mod: -1, text: `("",1,{},)`, want: `{"street":"","zip":1,"tags":[],"price":null}`},
		{name: "hstore", oid: 16508, mod: -1, text: `"a"=>"1", "b c"=>NULL, "q\"x"=>"\\"`, want: `"{\"a\":\"1\",\"b c\":null,\"q\\\"x\":\"\\\\\"}"`},
		{name: "hstore empty", oid: 16508, mod: -1, text: ``, want: `"{}"`},
		{name: "ltree", oid: 16509, mod: -1, text: `a.b.c`, want: `"a.b.c"`},
		{name: "composite array with bounds refused", oid: 16502, mod: -1, text: `(a,1,"[0:0]={x}",)`, fail: true},
	}
	types := testCatalog(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := types.Resolve(t.Context(), []uint32{tc.oid}, StaticType); err != nil {
				t.Fatal(err)
			}
			n, err := buildNode(types, tc.oid, tc.mod, 0)
			if err != nil {
				t.Fatal(err)
			}
			var c converter
			got, err := c.appendConnect(nil, n, []byte(tc.text), true)
			if tc.fail {
				if err == nil {
					t.Fatalf("%q encoded as %s, want an error", tc.text, got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("%q: got %s, want %s", tc.text, got, tc.want)
			}
			// And the payload matches its own schema.
			schema := appendSchema(nil, n, true, "")
			var s map[string]any
			if err := json.Unmarshal(schema, &s); err != nil {
				t.Fatalf("schema %s: %v", schema, err)
			}
			d := json.NewDecoder(bytes.NewReader(got))
			d.UseNumber()
			var v any
			if err := d.Decode(&v); err != nil {
				t.Fatalf("payload %s: %v", got, err)
			}
			if err := connectcheck.Payload(s, v, "$"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestConnectDateRoundTrip checks the calendar arithmetic against the standard library.
func TestConnectDateRoundTrip(t *testing.T) {
	for days := int64(-800_000); days < 3_000_000; days += 997 {
		y, m, d := CivilFromDays(days)
		if got := DaysFromCivil(y, m, d); got != days {
			t.Fatalf("days %d -> %d-%d-%d -> %d", days, y, m, d, got)
		}
		if y >= 1 && y <= 9999 {
			want := time.Unix(days*86400, 0).UTC()
			if want.Year() != int(y) || int64(want.Month()) != m || int64(want.Day()) != d {
				t.Fatalf("days %d: %d-%d-%d, time says %s", days, y, m, d, want)
			}
		}
	}
}

// FuzzConnectValue: whatever the text, a json-with-schema conversion either fails or yields a
// payload that matches its schema; it never panics.
func FuzzConnectValue(f *testing.F) {
	oids := []struct {
		oid uint32
		mod int32
	}{
		{pgtype.NumericOID, -1}, {pgtype.NumericOID, 10<<16 | 2 + 4}, {pgtype.NumericOID, 5<<16 | (-2 & 0x7ff) + 4},
		{moneyOID, -1}, {pgtype.BitOID, 10}, {pgtype.VarbitOID, -1}, {pgtype.DateOID, -1}, {pgtype.TimeOID, 3},
		{pgtype.TimeOID, -1}, {pgtype.TimetzOID, -1}, {pgtype.TimestampOID, 2}, {pgtype.TimestampOID, -1},
		{pgtype.TimestamptzOID, -1}, {pgtype.IntervalOID, -1}, {pgtype.PointOID, -1}, {pgtype.BoxOID, -1},
		{pgtype.PathOID, -1}, {pgtype.PolygonOID, -1}, {pgtype.CircleOID, -1}, {pgtype.LineOID, -1},
		{pgtype.Int8ArrayOID, -1}, {16502, -1}, {16504, -1}, {16508, -1}, {pgtype.JSONBOID, -1}, {pgtype.Float8OID, -1},
	}
	for _, s := range []string{"", "1.50", "-12300", "NaN", "$1,000.00", "1010", "2024-01-31", "0044-03-15 BC",
		"24:00:00", "12:34:56.5+05:30", "2024-01-31 12:34:56.5+00 BC", "infinity",
		"1 year 2 mons -3 days +04:05:06.7", "-178000000 years", "(1,2)", "(2,2),(0,0)", "[(0,0),(1,1)]",
		"((0,0),(1,1),(1,0))", "<(1,2),3>", "{1,-1,0}", "[0:1][1:2]={{1,2},{3,4}}", `("a ""b""",1,"{x,y}",1.00)`,
		`{"(a,1,{},1.00)",NULL}`, `"a"=>"1", "b"=>NULL`, `{"a": null}`, "1e+100"} {
		for i := range oids {
			f.Add(uint8(i), []byte(s))
		}
	}
	types := testCatalog(f)
	if err := types.Resolve(context.Background(), []uint32{16502, 16504, 16508}, StaticType); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, pick uint8, text []byte) {
		o := oids[int(pick)%len(oids)]
		n, err := buildNode(types, o.oid, o.mod, 0)
		if err != nil {
			t.Fatal(err)
		}
		var c converter
		got, err := c.appendConnect(nil, n, text, true)
		if err != nil {
			return
		}
		var s map[string]any
		if err := json.Unmarshal(appendSchema(nil, n, true, ""), &s); err != nil {
			t.Fatal(err)
		}
		d := json.NewDecoder(bytes.NewReader(got))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("%d %q: invalid JSON %s: %v", o.oid, text, got, err)
		}
		if err := connectcheck.Payload(s, v, "$"); err != nil {
			t.Fatalf("%d %q: %s: %v", o.oid, text, got, err)
		}
	})
}
