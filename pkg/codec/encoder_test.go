package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/tidemark/cdc/pkg/change"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

var fixedNow = time.Date(2024, 2, 1, 10, 0, 0, 0, time.UTC)

func ordersTable() *change.Table {
	return &change.Table{
		Export: change.ExportID{Schema: "public", Table: "orders"},
		OID:    16_400,
		Columns: []change.Column{
			{Name: "id", TypeOID: pgtype.Int4OID, TypeMod: -1, Key: true},
			{Name: "region", TypeOID: pgtype.TextOID, TypeMod: -1, Key: true},
			{Name: "price", TypeOID: pgtype.NumericOID, TypeMod: -1},
			{Name: "tags", TypeOID: pgtype.TextArrayOID, TypeMod: -1},
			{Name: "doc", TypeOID: pgtype.JSONBOID, TypeMod: -1},
			{Name: "updated", TypeOID: pgtype.TimestamptzOID, TypeMod: -1},
		},
	}
}

func newTestEncoder(tb testing.TB, tbl *change.Table, tombstones bool) *Encoder {
	tb.Helper()
	e, err := NewEncoder(Config{
		Database: "shop", TopicPrefix: "tm", Tombstones: tombstones,
		Now: func() time.Time { return fixedNow },
	}, tbl)
	if err != nil {
		tb.Fatalf("NewEncoder: %v", err)
	}
	return e
}

func row(vals ...any) [][]byte {
	out := make([][]byte, len(vals))
	for i, v := range vals {
		if v != nil {
			out[i] = []byte(v.(string))
		}
	}
	return out
}

var (
	txSource = Source{LSN: 0x1_006B3748, Xid: 731, Seq: 3, Time: time.Date(2024, 1, 31, 12, 0, 0, 250_000_000, time.UTC)}
	snapSrc  = Source{LSN: 0x1_006B3747, Seq: 17, Time: time.Date(2024, 1, 31, 11, 0, 0, 0, time.UTC), Snapshot: true, Attempt: 2}
	fullRow  = row("1", "eu", "9.99", `{a,"b c"}`, `{"k": "v"}`, "2024-01-31 12:00:00.5+00")
	newRow   = row("1", "eu", "12.50", `{}`, `{"k": "w"}`, "2024-01-31 12:01:00+00")
	movedRow = row("2", "us", "12.50", nil, nil, "2024-01-31 12:01:00+00")
	keyOnly  = row("1", "eu", nil, nil, nil, nil)
)

// TestEnvelopeGolden pins the exact bytes of every kind of record. Run with -update to rewrite.
func TestEnvelopeGolden(t *testing.T) {
	tests := []struct {
		name   string
		encode func(e *Encoder) ([]change.Record, error)
	}{
		{name: "read", encode: func(e *Encoder) ([]change.Record, error) { return e.Read(nil, snapSrc, fullRow) }},
		{name: "insert", encode: func(e *Encoder) ([]change.Record, error) { return e.Insert(nil, txSource, fullRow) }},
		{name: "update", encode: func(e *Encoder) ([]change.Record, error) { return e.Update(nil, txSource, nil, newRow, nil) }},
		{name: "update_full_identity", encode: func(e *Encoder) ([]change.Record, error) {
			return e.Update(nil, txSource, fullRow, newRow, nil)
		}},
		{name: "update_key_change", encode: func(e *Encoder) ([]change.Record, error) {
			return e.Update(nil, txSource, keyOnly, movedRow, nil)
		}},
		{name: "update_unchanged_toast", encode: func(e *Encoder) ([]change.Record, error) {
			return e.Update(nil, txSource, nil, row("1", "eu", "1", nil, nil, nil), []bool{false, false, false, true, true, false})
		}},
		{name: "delete", encode: func(e *Encoder) ([]change.Record, error) { return e.Delete(nil, txSource, keyOnly) }},
		{name: "truncate", encode: func(e *Encoder) ([]change.Record, error) { return e.Truncate(nil, txSource) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := tt.encode(newTestEncoder(t, ordersTable(), true))
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, tt.name, dumpRecords(t, recs))
		})
	}
}

func dumpRecords(tb testing.TB, recs []change.Record) []byte {
	tb.Helper()
	var b bytes.Buffer
	for i, r := range recs {
		fmt.Fprintf(&b, "record %d\ntopic: %s\npartition: %d\nkey: %s\n", i, r.Topic, r.Partition, nilText(r.Key))
		for _, h := range r.Headers {
			fmt.Fprintf(&b, "header %s: %s\n", h.Key, h.Value)
		}
		fmt.Fprintf(&b, "value: %s\n\n", nilText(r.Value))
		for _, j := range [][]byte{r.Key, r.Value} {
			if j != nil && !json.Valid(j) {
				tb.Errorf("record %d: invalid JSON %s", i, j)
			}
		}
	}
	return b.Bytes()
}

func nilText(b []byte) string {
	if b == nil {
		return "<nil>"
	}
	return string(b)
}

func checkGolden(tb testing.TB, name string, got []byte) {
	tb.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			tb.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		tb.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		tb.Fatalf("output differs from %s (run go test -update if intended)\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

// envelope is the decoded value, for assertions that do not depend on exact bytes.
type envelope struct {
	Before map[string]any `json:"before"`
	After  map[string]any `json:"after"`
	Source map[string]any `json:"source"`
	Op     string         `json:"op"`
	TsMs   int64          `json:"ts_ms"`
}

func decode(tb testing.TB, r change.Record) envelope {
	tb.Helper()
	var env envelope
	d := json.NewDecoder(bytes.NewReader(r.Value))
	d.UseNumber()
	if err := d.Decode(&env); err != nil {
		tb.Fatalf("decode %s: %v", r.Value, err)
	}
	return env
}

func header(r change.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return "<missing>"
}

func TestRecordShapes(t *testing.T) {
	type want struct {
		op, key, oldKey, newKey string
		tombstone               bool
		partition               int32
		before, after           bool
	}
	tests := []struct {
		name       string
		tombstones bool
		lsn        string // default 1/6B3748 (txSource)
		encode     func(e *Encoder) ([]change.Record, error)
		want       []want
	}{
		{name: "read", lsn: "1/6B3747", encode: func(e *Encoder) ([]change.Record, error) { return e.Read(nil, snapSrc, fullRow) },
			want: []want{{op: "r", key: `{"id":1,"region":"eu"}`, after: true}}},
		{name: "insert", encode: func(e *Encoder) ([]change.Record, error) { return e.Insert(nil, txSource, fullRow) },
			want: []want{{op: "c", key: `{"id":1,"region":"eu"}`, after: true}}},
		{name: "update same key with old tuple", encode: func(e *Encoder) ([]change.Record, error) {
			return e.Update(nil, txSource, fullRow, newRow, nil)
		}, want: []want{{op: "u", key: `{"id":1,"region":"eu"}`, before: true, after: true}}},
		{name: "update key change with tombstones", tombstones: true, encode: func(e *Encoder) ([]change.Record, error) {
			return e.Update(nil, txSource, keyOnly, movedRow, nil)
		}, want: []want{
			{op: "d", key: `{"id":1,"region":"eu"}`, oldKey: `{"id":1,"region":"eu"}`, newKey: `{"id":2,"region":"us"}`, before: true},
			{op: "d", key: `{"id":1,"region":"eu"}`, oldKey: `{"id":1,"region":"eu"}`, newKey: `{"id":2,"region":"us"}`, tombstone: true},
			{op: "c", key: `{"id":2,"region":"us"}`, oldKey: `{"id":1,"region":"eu"}`, newKey: `{"id":2,"region":"us"}`, after: true},
		}},
		{name: "update key change without tombstones", encode: func(e *Encoder) ([]change.Record, error) {
			return e.Update(nil, txSource, keyOnly, movedRow, nil)
		}, want: []want{
			{op: "d", key: `{"id":1,"region":"eu"}`, oldKey: `{"id":1,"region":"eu"}`, newKey: `{"id":2,"region":"us"}`, before: true},
			{op: "c", key: `{"id":2,"region":"us"}`, oldKey: `{"id":1,"region":"eu"}`, newKey: `{"id":2,"region":"us"}`, after: true},
		}},
		{name: "delete with tombstone", tombstones: true, encode: func(e *Encoder) ([]change.Record, error) {
			return e.Delete(nil, txSource, keyOnly)
		}, want: []want{{op: "d", key: `{"id":1,"region":"eu"}`, before: true}, {op: "d", key: `{"id":1,"region":"eu"}`, tombstone: true}}},
		{name: "delete without tombstone", encode: func(e *Encoder) ([]change.Record, error) {
			return e.Delete(nil, txSource, keyOnly)
		}, want: []want{{op: "d", key: `{"id":1,"region":"eu"}`, before: true}}},
		{name: "truncate", tombstones: true, encode: func(e *Encoder) ([]change.Record, error) { return e.Truncate(nil, txSource) },
			want: []want{{op: "t", partition: change.AllPartitions}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newTestEncoder(t, ordersTable(), tt.tombstones)
			recs, err := tt.encode(e)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != len(tt.want) {
				t.Fatalf("got %d records, want %d:\n%s", len(recs), len(tt.want), dumpRecords(t, recs))
			}
			for i, w := range tt.want {
				r := recs[i]
				if w.partition == 0 {
					w.partition = change.AnyPartition
				}
				if r.Topic != "tm.public.orders" || r.Partition != w.partition {
					t.Errorf("record %d: topic %q partition %d", i, r.Topic, r.Partition)
				}
				if w.op == "t" {
					// The orders table has a key: its compacted topic refuses a null key.
					if string(r.Key) != "{}" {
						t.Errorf("truncate key = %q, want {}", r.Key)
					}
				} else if string(r.Key) != w.key {
					t.Errorf("record %d: key %s, want %s", i, r.Key, w.key)
				}
				if got := header(r, HeaderOp); got != w.op {
					t.Errorf("record %d: op header %q, want %q", i, got, w.op)
				}
				wantLSN := tt.lsn
				if wantLSN == "" {
					wantLSN = "1/6B3748"
				}
				if got := header(r, HeaderLSN); got != wantLSN {
					t.Errorf("record %d: lsn header %q", i, got)
				}
				if w.oldKey != "" && (header(r, HeaderOldKey) != w.oldKey || header(r, HeaderNewKey) != w.newKey) {
					t.Errorf("record %d: key headers %q %q", i, header(r, HeaderOldKey), header(r, HeaderNewKey))
				}
				if w.oldKey == "" && len(r.Headers) != 2 {
					t.Errorf("record %d: %d headers, want 2", i, len(r.Headers))
				}
				if w.tombstone {
					if r.Value != nil {
						t.Errorf("record %d: tombstone value %s", i, r.Value)
					}
					continue
				}
				env := decode(t, r)
				if env.Op != w.op || (env.Before != nil) != w.before || (env.After != nil) != w.after {
					t.Errorf("record %d: op %q before %v after %v", i, env.Op, env.Before, env.After)
				}
			}
		})
	}
}

func TestUpdateUnchangedToast(t *testing.T) {
	unchanged := []bool{false, false, false, true, true, false}
	after := row("1", "eu", "5", nil, nil, "2024-01-31 12:01:00+00")
	const absent = "<absent>"
	tests := []struct {
		name     string
		mode     Unchanged
		before   [][]byte
		wantTags any
		wantDoc  any
		// wantHeader is HeaderUnchanged ("" = no header).
		wantHeader string
	}{
		{name: "no old tuple leaves columns out", before: nil, wantTags: absent, wantDoc: absent, wantHeader: `["tags","doc"]`},
		{name: "key-only old tuple leaves columns out", before: keyOnly, wantTags: absent, wantDoc: absent, wantHeader: `["tags","doc"]`},
		{name: "full old tuple supplies the values", before: fullRow, wantTags: []any{"a", "b c"}, wantDoc: map[string]any{"k": "v"}},
		{name: "old tuple with null leaves that column out", before: row("1", "eu", "1", nil, `{"k": 1}`, nil),
			wantTags: absent, wantDoc: map[string]any{"k": json.Number("1")}, wantHeader: `["tags"]`},
		{name: "placeholder mode writes the placeholder", mode: UnchangedPlaceholder, before: keyOnly,
			wantTags: DefaultPlaceholder, wantDoc: DefaultPlaceholder, wantHeader: `["tags","doc"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewEncoder(Config{Database: "shop", TopicPrefix: "tm", Tombstones: true, Unchanged: tt.mode,
				Now: func() time.Time { return fixedNow }}, ordersTable())
			if err != nil {
				t.Fatal(err)
			}
			recs, err := e.Update(nil, txSource, tt.before, after, unchanged)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 {
				t.Fatalf("got %d records, want 1", len(recs))
			}
			env := decode(t, recs[0])
			if env.Op != "u" {
				t.Fatalf("op %q", env.Op)
			}
			get := func(col string) string {
				v, ok := env.After[col]
				if !ok {
					return absent
				}
				return fmt.Sprint(v)
			}
			if got, want := get("tags"), fmt.Sprint(tt.wantTags); got != want {
				t.Errorf("tags = %s, want %s", got, want)
			}
			if got, want := get("doc"), fmt.Sprint(tt.wantDoc); got != want {
				t.Errorf("doc = %s, want %s", got, want)
			}
			if env.After["price"] != "5" || get("updated") == absent {
				t.Errorf("price = %v, updated = %s", env.After["price"], get("updated"))
			}
			if got := header(recs[0], HeaderUnchanged); got != tt.wantHeader && (tt.wantHeader != "" || got != "<missing>") {
				t.Errorf("header %s = %q, want %q", HeaderUnchanged, got, tt.wantHeader)
			}
		})
	}
}

func TestUnchangedToastCustomPlaceholder(t *testing.T) {
	e, err := NewEncoder(Config{TopicPrefix: "tm", Unchanged: UnchangedPlaceholder, Placeholder: `"n/a"`}, ordersTable())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := e.Update(nil, txSource, nil, row("1", "eu", "5", nil, "{}", nil), []bool{false, false, false, true, false, false})
	if err != nil {
		t.Fatal(err)
	}
	if env := decode(t, recs[0]); env.After["tags"] != `"n/a"` {
		t.Fatalf("tags = %#v", env.After["tags"])
	}
}

func TestUnchangedKeyColumnWithoutOldValueFails(t *testing.T) {
	// A toasted key column sent as 'u' and no old tuple: the record cannot be keyed.
	tbl := &change.Table{Export: change.ExportID{Schema: "s", Table: "docs"}, Columns: []change.Column{
		{Name: "path", TypeOID: pgtype.TextOID, Key: true},
		{Name: "body", TypeOID: pgtype.TextOID},
	}}
	for _, mode := range []Unchanged{UnchangedOmit, UnchangedPlaceholder} {
		e, err := NewEncoder(Config{TopicPrefix: "tm", Unchanged: mode}, tbl)
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Update(nil, txSource, nil, row(nil, "new"), []bool{true, false})
		if err == nil || !strings.Contains(err.Error(), `key column "path"`) || !strings.Contains(err.Error(), "REPLICA IDENTITY FULL") {
			t.Fatalf("mode %s: err = %v", mode, err)
		}
	}
}

func TestUnchangedKeyColumnDoesNotLookLikeKeyChange(t *testing.T) {
	// A toasted key column sent as 'u' with a key-only old tuple: the old tuple supplies it.
	tbl := &change.Table{Export: change.ExportID{Schema: "s", Table: "docs"}, Columns: []change.Column{
		{Name: "path", TypeOID: pgtype.TextOID, Key: true},
		{Name: "body", TypeOID: pgtype.TextOID},
	}}
	e := newTestEncoder(t, tbl, true)
	recs, err := e.Update(nil, txSource, row("/a", nil), row(nil, "new"), []bool{true, false})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || header(recs[0], HeaderOp) != "u" || string(recs[0].Key) != `{"path":"/a"}` {
		t.Fatalf("got:\n%s", dumpRecords(t, recs))
	}
}

func TestKeylessTable(t *testing.T) {
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "log"}, Columns: []change.Column{
		{Name: "msg", TypeOID: pgtype.TextOID},
	}}
	e := newTestEncoder(t, tbl, true)
	var recs []change.Record
	var err error
	recs, err = e.Insert(recs, txSource, row("hi"))
	if err == nil {
		recs, err = e.Update(recs, txSource, row("hi"), row("ho"), nil)
	}
	if err == nil {
		recs, err = e.Delete(recs, txSource, row("ho"))
	}
	if err == nil {
		recs, err = e.Truncate(recs, txSource) // its topic is not compacted: a null key
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("got %d records (tombstones on a keyless table?), want 4:\n%s", len(recs), dumpRecords(t, recs))
	}
	for i, op := range []string{"c", "u", "d", "t"} {
		if recs[i].Key != nil || header(recs[i], HeaderOp) != op || recs[i].Value == nil {
			t.Errorf("record %d: key %s op %s", i, recs[i].Key, header(recs[i], HeaderOp))
		}
	}
}

func TestSourceFields(t *testing.T) {
	e := newTestEncoder(t, ordersTable(), true)
	recs, err := e.Read(nil, snapSrc, fullRow)
	if err != nil {
		t.Fatal(err)
	}
	env := decode(t, recs[0])
	s := env.Source
	checks := map[string]any{
		"version": "tidemark-1", "connector": "tidemark", "name": "tm", "db": "shop", "schema": "public",
		"table": "orders", "lsn": json.Number(fmt.Sprint(uint64(snapSrc.LSN))), "lsn_text": "1/6B3747",
		"txId": json.Number("0"), "sequence": json.Number("17"), "snapshot": true, "attempt": json.Number("2"),
		"ts_ms": json.Number(fmt.Sprint(snapSrc.Time.UnixMilli())),
	}
	for k, want := range checks {
		if s[k] != want {
			t.Errorf("source.%s = %#v, want %#v", k, s[k], want)
		}
	}
	if env.TsMs != fixedNow.UnixMilli() {
		t.Errorf("ts_ms = %d, want %d", env.TsMs, fixedNow.UnixMilli())
	}
	recs, _ = e.Insert(nil, txSource, fullRow)
	if _, ok := decode(t, recs[0]).Source["attempt"]; ok {
		t.Error("attempt written for a non-snapshot change")
	}
}

func TestRecordsOutliveEncoderBuffers(t *testing.T) {
	e := newTestEncoder(t, ordersTable(), true)
	var recs []change.Record
	var want []string
	for i := range 2000 { // crosses several arena chunks
		r := row(fmt.Sprint(i), strings.Repeat("x", i%50), "1", nil, nil, nil)
		var err error
		if recs, err = e.Insert(recs, txSource, r); err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf(`{"id":%d,"region":"%s"}`, i, strings.Repeat("x", i%50)))
	}
	for i, r := range recs {
		if string(r.Key) != want[i] {
			t.Fatalf("record %d key %s, want %s", i, r.Key, want[i])
		}
		if env := decode(t, r); fmt.Sprint(env.After["id"]) != fmt.Sprint(i) {
			t.Fatalf("record %d value overwritten: %s", i, r.Value)
		}
	}
	// Appending to a record's slices must not clobber the next record.
	_ = append(recs[0].Key, "junk"...)
	_ = append(recs[0].Headers, change.Header{Key: "x"})
	if string(recs[1].Key) != want[1] || recs[1].Headers[0].Key != HeaderLSN {
		t.Fatal("append to one record's slices overwrote the next record")
	}
}

func TestCloneIsIndependent(t *testing.T) {
	e := newTestEncoder(t, ordersTable(), true)
	c := e.Clone()
	a, err := e.Insert(nil, txSource, fullRow)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Insert(nil, txSource, movedRow)
	if err != nil {
		t.Fatal(err)
	}
	if string(a[0].Key) != `{"id":1,"region":"eu"}` || string(b[0].Key) != `{"id":2,"region":"us"}` {
		t.Fatalf("keys %s %s", a[0].Key, b[0].Key)
	}
	if c.Topic() != e.Topic() {
		t.Fatalf("topics %q %q", c.Topic(), e.Topic())
	}
}

func TestEncoderErrors(t *testing.T) {
	e := newTestEncoder(t, ordersTable(), true)
	tests := []struct {
		name   string
		encode func() ([]change.Record, error)
	}{
		{name: "short row", encode: func() ([]change.Record, error) { return e.Insert(nil, txSource, row("1")) }},
		{name: "bad value", encode: func() ([]change.Record, error) {
			return e.Insert(nil, txSource, row("x", "eu", nil, nil, nil, nil))
		}},
		{name: "bad old tuple", encode: func() ([]change.Record, error) {
			return e.Update(nil, txSource, row("1"), newRow, nil)
		}},
		{name: "bad unchanged flags", encode: func() ([]change.Record, error) {
			return e.Update(nil, txSource, nil, newRow, []bool{true})
		}},
		{name: "delete without old tuple", encode: func() ([]change.Record, error) { return e.Delete(nil, txSource, nil) }},
		{name: "insert nil row", encode: func() ([]change.Record, error) { return e.Insert(nil, txSource, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := tt.encode()
			if err == nil {
				t.Fatalf("want error, got:\n%s", dumpRecords(t, recs))
			}
			if len(recs) != 0 {
				t.Fatalf("records appended on error: %d", len(recs))
			}
		})
	}
	if _, err := e.Insert(nil, txSource, row("x", "eu", nil, nil, nil, nil)); err == nil || !strings.Contains(err.Error(), `"id"`) {
		t.Errorf("error does not name the column: %v", err)
	}
}

func TestNewEncoderErrors(t *testing.T) {
	tests := []struct {
		name string
		tbl  *change.Table
	}{
		{name: "nil table"},
		{name: "no columns", tbl: &change.Table{Export: change.ExportID{Schema: "s", Table: "t"}}},
		{name: "empty name", tbl: &change.Table{Columns: []change.Column{{Name: ""}}}},
		{name: "duplicate name", tbl: &change.Table{Columns: []change.Column{{Name: "a"}, {Name: "a"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewEncoder(Config{}, tt.tbl); err == nil {
				t.Fatal("want error")
			}
		})
	}
}

func TestIdentifiersAreEscaped(t *testing.T) {
	tbl := &change.Table{Export: change.ExportID{Schema: `Sch"ema`, Table: "Tab\\le"}, Columns: []change.Column{
		{Name: "we\"ird\ncol", TypeOID: pgtype.Int4OID, Key: true},
	}}
	e, err := NewEncoder(Config{TopicPrefix: "p", Database: "d\"b"}, tbl)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := e.Insert(nil, Source{}, row("1"))
	if err != nil {
		t.Fatal(err)
	}
	if string(recs[0].Key) != `{"we\"ird\ncol":1}` {
		t.Errorf("key %s", recs[0].Key)
	}
	env := decode(t, recs[0])
	if env.Source["schema"] != `Sch"ema` || env.Source["table"] != `Tab\le` || env.Source["db"] != `d"b` {
		t.Errorf("source %v", env.Source)
	}
	if recs[0].Topic != "p.Sch_ema.Tab_le" {
		t.Errorf("topic %q", recs[0].Topic)
	}
}

func TestDeleteKey(t *testing.T) {
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "t"}, Columns: []change.Column{
		{Name: "id", TypeOID: 23, Key: true}, {Name: "v", TypeOID: 25},
	}}
	enc, err := NewEncoder(Config{Database: "db", TopicPrefix: "p", Tombstones: true, Now: func() time.Time { return time.UnixMilli(5) }}, tbl)
	if err != nil {
		t.Fatal(err)
	}
	recs := enc.DeleteKey(nil, Source{LSN: 0x10, Snapshot: true, Attempt: 2}, []byte(`{"id":7}`))
	if len(recs) != 2 {
		t.Fatalf("got %d records, want delete and tombstone", len(recs))
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(recs[0].Value, &env); err != nil {
		t.Fatalf("delete value is not JSON: %v: %s", err, recs[0].Value)
	}
	if string(env["before"]) != `{"id":7}` || string(env["after"]) != "null" || string(env["op"]) != `"d"` {
		t.Fatalf("delete envelope = %s", recs[0].Value)
	}
	if string(recs[0].Key) != `{"id":7}` || string(recs[1].Key) != `{"id":7}` || recs[1].Value != nil {
		t.Fatalf("keys/tombstone wrong: %+v", recs)
	}
}

func TestMaxRecordBytes(t *testing.T) {
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "t"}, Columns: []change.Column{
		{Name: "id", TypeOID: 23, Key: true}, {Name: "v", TypeOID: 25},
	}}
	enc, err := NewEncoder(Config{TopicPrefix: "p", Tombstones: true, MaxRecordBytes: 1000}, tbl)
	if err != nil {
		t.Fatal(err)
	}
	small := [][]byte{[]byte("1"), []byte("x")}
	big := [][]byte{[]byte("2"), bytes.Repeat([]byte("x"), 2000)}
	tests := []struct {
		name string
		run  func([]change.Record) ([]change.Record, error)
		fail bool
	}{
		{name: "small insert", run: func(d []change.Record) ([]change.Record, error) { return enc.Insert(d, Source{}, small) }},
		{name: "big insert", fail: true, run: func(d []change.Record) ([]change.Record, error) { return enc.Insert(d, Source{}, big) }},
		{name: "big snapshot row", fail: true, run: func(d []change.Record) ([]change.Record, error) { return enc.Read(d, Source{}, big) }},
		{name: "key-changing update to a big row", fail: true, run: func(d []change.Record) ([]change.Record, error) {
			return enc.Update(d, Source{}, small, big, nil)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prior := []change.Record{{Topic: "prior"}}
			got, err := tt.run(prior)
			if tt.fail {
				if !errors.Is(err, ErrRecordTooLarge) {
					t.Fatalf("err = %v, want ErrRecordTooLarge", err)
				}
				if len(got) != 1 {
					t.Fatalf("dst grew to %d records on error", len(got))
				}
				return
			}
			if err != nil || len(got) != 2 {
				t.Fatalf("got %d records, err %v", len(got), err)
			}
		})
	}
}
