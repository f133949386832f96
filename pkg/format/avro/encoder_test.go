package avro_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	tmavro "github.com/tidemark/cdc/pkg/format/avro"
	jsonfmt "github.com/tidemark/cdc/pkg/format/json"
	"github.com/tidemark/cdc/pkg/schemareg"
)

const moodOID = 70000 // an enum of the type catalog

// column is one column of the test table: its type, the PostgreSQL text of a value, the value
// twmb/avro decodes from what the encoder wrote, and the JSON the decoder reads back.
type column struct {
	name string
	oid  uint32
	mod  int32
	text string
	want any
	json string
}

func date(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

var columns = []column{
	{name: "id", oid: pgtype.Int4OID, mod: -1, text: "42", want: int32(42), json: "42"},
	{name: "small", oid: pgtype.Int2OID, mod: -1, text: "-7", want: int32(-7), json: "-7"},
	{name: "big", oid: pgtype.Int8OID, mod: -1, text: "-9223372036854775808", want: int64(-9223372036854775808), json: "-9223372036854775808"},
	{name: "oid", oid: pgtype.OIDOID, mod: -1, text: "4294967295", want: int64(4294967295), json: "4294967295"},
	{name: "f4", oid: pgtype.Float4OID, mod: -1, text: "1.5", want: float32(1.5), json: "1.5"},
	{name: "f8", oid: pgtype.Float8OID, mod: -1, text: "-1e+100", want: float64(-1e100), json: "-1e+100"},
	{name: "f8nan", oid: pgtype.Float8OID, mod: -1, text: "Infinity", json: `"Infinity"`},
	{name: "price", oid: pgtype.NumericOID, mod: (10<<16 | 2) + 4, text: "-1234.50", want: big.NewRat(-123450, 100), json: `"-1234.50"`},
	{name: "wide", oid: pgtype.NumericOID, mod: (38<<16 | 0) + 4, text: "123456789012345678901234567890", json: `"123456789012345678901234567890"`},
	{name: "ratio", oid: pgtype.NumericOID, mod: -1, text: "3.14159",
		want: map[string]any{"scale": int32(5), "value": []byte{0x04, 0xcb, 0x2f}}, json: `"3.14159"`},
	{name: "cash", oid: 790, mod: -1, text: "-$1,234.56", want: big.NewRat(-123456, 100), json: `"-1234.56"`},
	{name: "flag", oid: pgtype.BoolOID, mod: -1, text: "t", want: true, json: "true"},
	{name: "label", oid: pgtype.TextOID, mod: -1, text: "héllo \"world\"\n", want: "héllo \"world\"\n", json: `"héllo \"world\"\n"`},
	{name: "code", oid: pgtype.VarcharOID, mod: 14, text: "abc", want: "abc", json: `"abc"`},
	{name: "blob", oid: pgtype.ByteaOID, mod: -1, text: `\x00ff10`, want: []byte{0, 0xff, 0x10}, json: `"AP8Q"`},
	{name: "u", oid: pgtype.UUIDOID, mod: -1, text: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", want: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", json: `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
	{name: "day", oid: pgtype.DateOID, mod: -1, text: "2024-01-31", want: date(2024, 1, 31), json: `"2024-01-31"`},
	{name: "bc", oid: pgtype.DateOID, mod: -1, text: "0044-03-15 BC", json: `"0044-03-15 BC"`},
	{name: "clock", oid: pgtype.TimeOID, mod: -1, text: "12:34:56.5", want: 45296500000 * time.Microsecond, json: `"12:34:56.5"`},
	{name: "clock3", oid: pgtype.TimeOID, mod: 3, text: "23:59:59.999", want: 86399999 * time.Millisecond, json: `"23:59:59.999"`},
	{name: "at", oid: pgtype.TimestampOID, mod: -1, text: "2024-01-31 12:34:56.123456",
		want: time.Date(2024, 1, 31, 12, 34, 56, 123456000, time.UTC), json: `"2024-01-31T12:34:56.123456"`},
	{name: "at3", oid: pgtype.TimestampOID, mod: 3, text: "1969-12-31 23:59:59.5",
		want: time.Date(1969, 12, 31, 23, 59, 59, 500000000, time.UTC), json: `"1969-12-31T23:59:59.5"`},
	{name: "atinf", oid: pgtype.TimestampOID, mod: -1, text: "infinity", json: `"infinity"`},
	{name: "attz", oid: pgtype.TimestamptzOID, mod: -1, text: "2024-01-31 14:34:56.5+02", want: "2024-01-31T12:34:56.5Z", json: `"2024-01-31T12:34:56.5Z"`},
	{name: "clocktz", oid: pgtype.TimetzOID, mod: -1, text: "12:34:56+05:30", want: "07:04:56Z", json: `"07:04:56Z"`},
	{name: "span", oid: pgtype.IntervalOID, mod: -1, text: "1 day 02:00:00", want: int64(93_600_000_000), json: `"93600000000 microseconds"`},
	{name: "doc", oid: pgtype.JSONBOID, mod: -1, text: `{"a": [1, 2]}`, want: `{"a": [1, 2]}`, json: `{"a": [1, 2]}`},
	{name: "ints", oid: pgtype.Int4ArrayOID, mod: -1, text: "{1,NULL,-3}", want: []any{int32(1), nil, int32(-3)}, json: "[1,null,-3]"},
	{name: "texts", oid: pgtype.TextArrayOID, mod: -1, text: `{"a b","q\"x",NULL,"NULL",plain}`,
		want: []any{"a b", `q"x`, nil, "NULL", "plain"}, json: `["a b","q\"x",null,"NULL","plain"]`},
	{name: "empty", oid: pgtype.Int8ArrayOID, mod: -1, text: "{}", want: []any{}, json: "[]"},
	{name: "bits", oid: pgtype.BitOID, mod: 3, text: "101", want: []byte{5}, json: `"101"`},
	{name: "bit1", oid: pgtype.BitOID, mod: 1, text: "1", want: true, json: `"1"`},
	{name: "addr", oid: pgtype.InetOID, mod: -1, text: "10.0.0.1/8", want: "10.0.0.1/8", json: `"10.0.0.1/8"`},
	{name: "pt", oid: pgtype.PointOID, mod: -1, text: "(1,2)", want: "(1,2)", json: `"(1,2)"`},
	{name: "mood", oid: moodOID, mod: -1, text: "happy", want: "happy", json: `"happy"`},
	{name: "Odd Name", oid: pgtype.TextOID, mod: -1, text: "x", want: "x", json: `"x"`},
	{name: "Odd_Name", oid: pgtype.TextOID, mod: -1, text: "y", want: "y", json: `"y"`},
	{name: "Odd-Name", oid: pgtype.TextOID, mod: -1, text: "z", want: "z", json: `"z"`},
	{name: "nothing", oid: pgtype.TextOID, mod: -1, json: "null"},
}

func testTable() *change.Table {
	t := &change.Table{Export: change.ExportID{Schema: "public", Table: "things"}}
	for i, c := range columns {
		t.Columns = append(t.Columns, change.Column{Name: c.name, TypeOID: c.oid, TypeMod: c.mod, Key: i == 0})
	}
	return t
}

func testRow() [][]byte {
	row := make([][]byte, len(columns))
	for i, c := range columns {
		if c.name != "nothing" {
			row[i] = []byte(c.text)
		}
	}
	return row
}

func testConfig(t testing.TB, reg *srfake.Registry) format.Config {
	t.Helper()
	cl, err := schemareg.New(schemareg.Config{URL: reg.URL()})
	if err != nil {
		t.Fatal(err)
	}
	types := format.NewTypes(nil)
	types.Add(format.TypeInfo{OID: moodOID, Schema: "public", Name: "mood", Type: 'e', Labels: []string{"sad", "happy"}})
	return format.Config{Database: "shop", TopicPrefix: "tm", Placeholder: "__debezium_unavailable_value", Types: types, Registry: cl}
}

func newEncoder(t testing.TB, cfg format.Config, tbl *change.Table) format.TableEncoder {
	t.Helper()
	f := tmavro.Format{}
	if err := f.Prepare(t.Context(), cfg, tbl); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	e, err := f.NewEncoder(cfg, tbl)
	if err != nil {
		t.Fatalf("NewEncoder: %v", err)
	}
	return e
}

// registered returns the id and the parsed schema of a framed datum, read from the registry.
func registered(t *testing.T, cfg format.Config, framed []byte, subject string) (*avro.Schema, []byte) {
	t.Helper()
	if len(framed) < 5 || framed[0] != 0 {
		t.Fatalf("record does not start with the magic byte and an id: % x", framed[:min(len(framed), 5)])
	}
	id := binary.BigEndian.Uint32(framed[1:5])
	s, err := cfg.Registry.Schema(t.Context(), schemareg.ID(id))
	if err != nil {
		t.Fatalf("schema id %d: %v", id, err)
	}
	latest, err := cfg.Registry.Register(t.Context(), subject, sr.TypeAvro, s.Schema)
	if err != nil || int(latest) != int(id) {
		t.Fatalf("subject %s has id %d (%v) for the schema of id %d", subject, latest, err, id)
	}
	parsed, err := avro.Parse(s.Schema)
	if err != nil {
		t.Fatalf("twmb/avro refuses the schema: %v\n%s", err, s.Schema)
	}
	return parsed, framed[5:]
}

// decodeSame decodes datum with schema and checks that the library encodes the decoded value
// into the same bytes.
func decodeSame(t *testing.T, schema *avro.Schema, datum []byte) map[string]any {
	t.Helper()
	var v any
	rest, err := schema.Decode(datum, &v)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left after the datum", len(rest))
	}
	again, err := schema.Encode(v)
	if err != nil {
		t.Fatalf("re-encode %v: %v", v, err)
	}
	if !bytes.Equal(again, datum) {
		t.Fatalf("twmb/avro encodes the decoded value differently:\n got % x\nwant % x", again, datum)
	}
	return v.(map[string]any)
}

func TestEncodeTypes(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	cfg := testConfig(t, reg)
	tbl := testTable()
	e := newEncoder(t, cfg, tbl)
	ch := &format.Change{Op: change.OpCreate, After: testRow(), TsMs: 1700000000123,
		Source: format.Source{LSN: 0x16B374D848, Xid: 771, Seq: 3, TsMs: 1700000000000}}
	enc, err := e.Encode(nil, ch)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	value, key := enc.Buf[:enc.Value], enc.Buf[enc.Value:enc.Value+enc.Key]

	vs, datum := registered(t, cfg, value, "tm.public.things-value")
	env := decodeSame(t, vs, datum)
	if env["before"] != nil || env["op"] != "c" || env["ts_ms"] != int64(1700000000123) {
		t.Errorf("envelope = before %v op %v ts_ms %v", env["before"], env["op"], env["ts_ms"])
	}
	src := env["source"].(map[string]any)
	wantSrc := map[string]any{"version": "tidemark-1", "connector": "tidemark", "name": "tm", "db": "shop", "schema": "public",
		"table": "things", "lsn": int64(0x16B374D848), "lsn_text": "16/B374D848", "txId": int64(771), "sequence": int64(3),
		"snapshot": "false", "attempt": nil, "ts_ms": int64(1700000000000)}
	if !reflect.DeepEqual(src, wantSrc) {
		t.Errorf("source = %v\nwant %v", src, wantSrc)
	}
	after := env["after"].(map[string]any)
	for _, c := range columns {
		field := map[string]string{"Odd Name": "Odd_Name_2", "Odd-Name": "Odd_Name_3"}[c.name]
		if field == "" {
			field = c.name
		}
		got, ok := after[field]
		if !ok {
			t.Errorf("after has no field for %q", c.name)
			continue
		}
		if c.want == nil {
			continue
		}
		if r, ok := c.want.(*big.Rat); ok {
			if g, ok := got.(*big.Rat); !ok || g.Cmp(r) != 0 {
				t.Errorf("%s = %v (%T), want %v", c.name, got, got, r)
			}
			continue
		}
		if tm, ok := c.want.(time.Time); ok {
			if g, ok := got.(time.Time); !ok || !g.Equal(tm) {
				t.Errorf("%s = %v (%T), want %v", c.name, got, got, tm)
			}
			continue
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s = %#v (%T), want %#v", c.name, got, got, c.want)
		}
	}

	ks, kdatum := registered(t, cfg, key, "tm.public.things-key")
	if k := decodeSame(t, ks, kdatum); !reflect.DeepEqual(k, map[string]any{"id": int32(42)}) {
		t.Errorf("key = %v", k)
	}

	// The decoder reads the record back as the json format writes its images.
	d := tmavro.NewDecoder(cfg.Registry)
	if !d.Recognizes(value) || (jsonfmt.Decoder{}).Recognizes(value) {
		t.Errorf("Recognizes: avro %v, json %v", d.Recognizes(value), (jsonfmt.Decoder{}).Recognizes(value))
	}
	var r format.Record
	if err := d.Decode(&r, key, value); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if r.Op != change.OpCreate || r.Before != nil || string(r.Key) != `{"id":42}` ||
		r.Source != (format.RecordSource{LSN: 0x16B374D848, TxID: 771, Sequence: 3, TsMs: 1700000000000, DB: "shop", Schema: "public", Table: "things"}) {
		t.Errorf("record = op %c before %s key %s source %+v", r.Op, r.Before, r.Key, r.Source)
	}
	var img map[string]json.RawMessage
	if err := json.Unmarshal(r.After, &img); err != nil {
		t.Fatalf("after is not JSON: %v\n%s", err, r.After)
	}
	for _, c := range columns {
		if got := string(img[c.name]); got != c.json {
			t.Errorf("decoded %s = %s, want %s", c.name, got, c.json)
		}
	}
}

func TestEncodeEnvelopes(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	cfg := testConfig(t, reg)
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "kv"}, Columns: []change.Column{
		{Name: "k", TypeOID: pgtype.TextOID, Key: true},
		{Name: "n", TypeOID: pgtype.NumericOID},
		{Name: "v", TypeOID: pgtype.TextOID},
	}}
	e := newEncoder(t, cfg, tbl)
	d := tmavro.NewDecoder(cfg.Registry)
	row := func(vals ...string) [][]byte {
		out := make([][]byte, len(vals))
		for i, v := range vals {
			if v != "NULL" {
				out[i] = []byte(v)
			}
		}
		return out
	}
	read := func(ch *format.Change) (format.Record, []byte) {
		t.Helper()
		enc, err := e.Encode(nil, ch)
		if err != nil {
			t.Fatalf("Encode %c: %v", ch.Op, err)
		}
		value, key := enc.Buf[:enc.Value], enc.Buf[enc.Value:enc.Value+enc.Key]
		s, datum := registered(t, cfg, value, "tm.public.kv-value")
		decodeSame(t, s, datum)
		var r format.Record
		if err := d.Decode(&r, key, value); err != nil {
			t.Fatalf("Decode %c: %v", ch.Op, err)
		}
		return r, key
	}
	snap := format.Source{LSN: 100, Snapshot: true, Attempt: 2}
	tests := []struct {
		name              string
		ch                format.Change
		before, after, ky string
	}{
		{"read", format.Change{Op: change.OpRead, Source: snap, After: row("a", "1.50", "x")}, "", `{"k":"a","n":"1.50","v":"x"}`, `{"k":"a"}`},
		{"update", format.Change{Op: change.OpUpdate, Before: row("a", "NULL", "NULL"), After: row("a", "-0.001", "y")},
			`{"k":"a","n":null,"v":null}`, `{"k":"a","n":"-0.001","v":"y"}`, `{"k":"a"}`},
		{"unchanged omitted", format.Change{Op: change.OpUpdate, After: row("a", "2", "NULL"), Unavail: []bool{false, false, true}},
			"", `{"k":"a","n":"2","v":null}`, `{"k":"a"}`},
		{"delete", format.Change{Op: change.OpDelete, Before: row("a", "NULL", "NULL")}, `{"k":"a","n":null,"v":null}`, "", `{"k":"a"}`},
		{"truncate", format.Change{Op: change.OpTruncate}, "", "", `{}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := read(&tc.ch)
			if string(r.Before) != tc.before || string(r.After) != tc.after || string(r.Key) != tc.ky || r.Op != tc.ch.Op {
				t.Errorf("op %c before %s after %s key %s; want before %s after %s key %s", r.Op, r.Before, r.After, r.Key, tc.before, tc.after, tc.ky)
			}
			if tc.ch.Source.Snapshot != r.Source.Snapshot || r.Source.Attempt != tc.ch.Source.Attempt {
				t.Errorf("source %+v", r.Source)
			}
		})
	}

	// A delete of a key read back from the topic: before holds the key's columns.
	key, err := e.AppendKey(nil, row("b", "3", "z"))
	if err != nil {
		t.Fatal(err)
	}
	r, k := read(&format.Change{Op: change.OpDelete, Key: key})
	if string(r.Before) != `{"k":"b","n":null,"v":null}` || r.After != nil || !bytes.Equal(k, key) {
		t.Errorf("delete from key: before %s after %s", r.Before, r.After)
	}

	// The placeholder goes into string columns only.
	cfg.Unchanged = format.UnchangedPlaceholder
	e = newEncoder(t, cfg, tbl)
	r, _ = read(&format.Change{Op: change.OpUpdate, After: row("a", "NULL", "NULL"), Unavail: []bool{false, true, true}})
	if string(r.After) != `{"k":"a","n":null,"v":"__debezium_unavailable_value"}` {
		t.Errorf("placeholder: after %s", r.After)
	}
}

func TestSchemaChanges(t *testing.T) {
	reg := srfake.New(srfake.WithGlobalCompat(sr.CompatBackward))
	defer reg.Close()
	backward(t, reg)
	cfg := testConfig(t, reg)
	cols := []change.Column{{Name: "id", TypeOID: pgtype.Int8OID, Key: true}, {Name: "a", TypeOID: pgtype.TextOID}}
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "t"}, Columns: cols}
	ids := map[uint32]bool{}
	encodeOne := func(e format.TableEncoder, row ...string) {
		t.Helper()
		r := make([][]byte, len(row))
		for i, v := range row {
			r[i] = []byte(v)
		}
		enc, err := e.Encode(nil, &format.Change{Op: change.OpCreate, After: r})
		if err != nil {
			t.Fatal(err)
		}
		ids[binary.BigEndian.Uint32(enc.Buf[1:5])] = true
	}
	encodeOne(newEncoder(t, cfg, tbl), "1", "x")
	encodeOne(newEncoder(t, cfg, tbl), "2", "y") // the same shape: the same id
	if len(ids) != 1 {
		t.Fatalf("one shape, ids %v", ids)
	}

	// A column added: optional with a default, BACKWARD accepts it as a new version.
	added := &change.Table{Export: tbl.Export, Columns: append(cols[:2:2], change.Column{Name: "b", TypeOID: pgtype.Int4OID})}
	encodeOne(newEncoder(t, cfg, added), "3", "z", "7")
	if len(ids) != 2 {
		t.Fatalf("two shapes, ids %v", ids)
	}
	versions, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := versions.Schemas(t.Context(), "tm.public.t-value")
	if err != nil || len(ss) != 2 {
		t.Fatalf("versions of tm.public.t-value: %d, %v", len(ss), err)
	}

	// A column retyped (text to int): BACKWARD refuses it, as the table's error alone.
	retyped := &change.Table{Export: tbl.Export, Columns: []change.Column{cols[0], {Name: "a", TypeOID: pgtype.Int4OID}, {Name: "b", TypeOID: pgtype.Int4OID}}}
	err = tmavro.Format{}.Prepare(t.Context(), cfg, retyped)
	var inc *schemareg.IncompatibleError
	if !errors.As(err, &inc) || inc.Subject != "tm.public.t-value" || !errors.Is(err, format.ErrSchemaRefused) {
		t.Fatalf("Prepare of a retyped column = %v, want an *IncompatibleError of tm.public.t-value", err)
	}
	if _, err := (tmavro.Format{}).NewEncoder(cfg, retyped); err == nil {
		t.Fatal("NewEncoder of an unregistered schema succeeded")
	}
}

// backward makes reg refuse, as a real registry does under BACKWARD, a schema that cannot read
// the data of the subject's latest (twmb/avro checks it).
func backward(t *testing.T, reg *srfake.Registry) {
	var mu sync.Mutex
	latest := map[string]*avro.Schema{}
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		subject, ok := strings.CutPrefix(r.URL.Path, "/subjects/")
		subject, ok2 := strings.CutSuffix(subject, "/versions")
		if r.Method != http.MethodPost || !ok || !ok2 {
			return false
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct{ Schema string }
		_ = json.Unmarshal(body, &req)
		s, err := avro.Parse(req.Schema)
		if err != nil {
			t.Errorf("twmb/avro refuses a registered schema: %v", err)
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if old := latest[subject]; old != nil {
			if err := avro.CheckCompatibility(old, s); err != nil {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				_, _ = fmt.Fprintf(w, `{"error_code":409,"message":%q}`, err.Error())
				return true
			}
		}
		latest[subject] = s
		return false
	})
}

func TestNoRegistry(t *testing.T) {
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "t"}, Columns: []change.Column{{Name: "id", TypeOID: pgtype.Int8OID, Key: true}}}
	if err := (tmavro.Format{}).Prepare(t.Context(), format.Config{}, tbl); !errors.Is(err, tmavro.ErrNoRegistry) {
		t.Errorf("Prepare without a registry = %v", err)
	}
	var r format.Record
	if err := (tmavro.Format{}).Decoder().Decode(&r, nil, []byte{0, 0, 0, 0, 1, 2}); !errors.Is(err, tmavro.ErrNoRegistry) {
		t.Errorf("Decode without a registry = %v", err)
	}
}

func TestNotRepresentable(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	cfg := testConfig(t, reg)
	tests := []struct {
		oid  uint32
		text string
	}{
		{pgtype.NumericOID, "NaN"},
		{pgtype.NumericOID, "-Infinity"},
		{pgtype.TimestampOID, "294276-12-31 23:59:59.999999"},
		{pgtype.IntervalOID, "178000000 years"},
	}
	for _, tc := range tests {
		tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "t"}, Columns: []change.Column{
			{Name: "id", TypeOID: pgtype.Int8OID, Key: true}, {Name: "v", TypeOID: tc.oid, TypeMod: -1}}}
		e := newEncoder(t, cfg, tbl)
		_, err := e.Encode(nil, &format.Change{Op: change.OpCreate, After: [][]byte{[]byte("1"), []byte(tc.text)}})
		var ve *format.ValueError
		if !errors.As(err, &ve) || !errors.Is(err, format.ErrNotRepresentable) {
			t.Errorf("%q: %v, want a ValueError wrapping ErrNotRepresentable", tc.text, err)
		}
	}
}

func schemaID(id uint32) schemareg.ID { return schemareg.ID(id) }

// TestArrayShapes: arrays of several dimensions or other lower bounds are written flattened, in
// row-major order, and HeaderArrayDims gives their shape per row image.
func TestArrayShapes(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	cfg := testConfig(t, reg)
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "grid"}, Columns: []change.Column{
		{Name: "id", TypeOID: pgtype.Int8OID, Key: true}, {Name: "a", TypeOID: pgtype.Int4ArrayOID},
		{Name: "t", TypeOID: pgtype.TextArrayOID}, {Name: "plain", TypeOID: pgtype.Int4ArrayOID}}}
	e := newEncoder(t, cfg, tbl)
	d := tmavro.NewDecoder(cfg.Registry)
	tests := []struct {
		name          string
		before, after []string
		img, header   string
	}{
		{"one dimension", nil, []string{"1", "{1,2}", "{x}", "{3}"}, `{"id":1,"a":[1,2],"t":["x"],"plain":[3]}`, ""},
		{"two dimensions", nil, []string{"1", "{{1,2},{3,NULL}}", `{{{"a"}}}`, "{}"},
			`{"id":1,"a":[1,2,3,null],"t":["a"],"plain":[]}`, `{"after":{"a":"[1:2][1:2]","t":"[1:1][1:1][1:1]"}}`},
		{"lower bounds, both images", []string{"1", "[0:1]={5,6}", "{y}", "{}"}, []string{"1", "{1}", "[-5:-4]={p,q}", "{}"},
			`{"id":1,"a":[1],"t":["p","q"],"plain":[]}`, `{"before":{"a":"[0:1]"},"after":{"t":"[-5:-4]"}}`},
	}
	row := func(vals []string) [][]byte {
		if vals == nil {
			return nil
		}
		out := make([][]byte, len(vals))
		for i, v := range vals {
			out[i] = []byte(v)
		}
		return out
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			op := change.OpCreate
			if tc.before != nil {
				op = change.OpUpdate
			}
			enc, err := e.Encode(nil, &format.Change{Op: op, Before: row(tc.before), After: row(tc.after)})
			if err != nil {
				t.Fatal(err)
			}
			value := enc.Buf[:enc.Value]
			s, datum := registered(t, cfg, value, "tm.public.grid-value")
			decodeSame(t, s, datum)
			var r format.Record
			if err := d.Decode(&r, enc.Buf[enc.Value:enc.Value+enc.Key], value); err != nil {
				t.Fatal(err)
			}
			header := string(enc.Buf[enc.Value+enc.Key:])
			if string(r.After) != tc.img || header != tc.header || (header != "" && enc.HeaderKey != tmavro.HeaderArrayDims) {
				t.Errorf("after %s, header %s=%s; want %s, %s", r.After, enc.HeaderKey, header, tc.img, tc.header)
			}
		})
	}
}
