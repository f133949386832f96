package avro_test

import (
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	tmavro "github.com/tidemark/cdc/pkg/format/avro"
)

// TestDecoderSchema: a decoded record's Schema is its value schema's id, and the decoder's
// Schema of it gives the row's columns in order, with the PostgreSQL type a created table gets
// and a reading of each value that round-trips to PostgreSQL's text.
func TestDecoderSchema(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	cfg := testConfig(t, reg)
	e := newEncoder(t, cfg, testTable())
	enc, err := e.Encode(nil, &format.Change{Op: change.OpCreate, After: testRow()})
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	value, key := enc.Buf[:enc.Value], enc.Buf[enc.Value:enc.Value+enc.Key]
	dec := tmavro.NewDecoder(cfg.Registry)
	var rec format.Record
	if err := dec.Decode(&rec, key, value); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if string(rec.Schema) != string(value[1:5]) {
		t.Fatalf("Record.Schema = % x, want the value's schema id % x", rec.Schema, value[1:5])
	}
	s, err := dec.Schema(rec.Schema)
	if err != nil {
		t.Fatalf("Schema: %v", err)
	}
	types := map[string]string{
		"id": "integer", "small": "smallint", "big": "bigint", "oid": "bigint", "f4": "real", "f8": "double precision",
		"f8nan": "double precision", "price": "numeric", "wide": "numeric", "ratio": "numeric", "cash": "numeric",
		"flag": "boolean", "label": "text", "code": "text", "blob": "bytea", "u": "uuid", "day": "date", "bc": "date",
		"clock": "time", "clock3": "time", "at": "timestamp", "at3": "timestamp", "atinf": "timestamp",
		"attz": "timestamptz", "clocktz": "timetz", "span": "interval", "doc": "jsonb", "ints": "integer[]",
		"texts": "text[]", "empty": "bigint[]", "bits": "bit varying", "bit1": "bit varying", "addr": "text", "pt": "text",
		"mood": "text", "Odd Name": "text", "Odd_Name": "text", "Odd-Name": "text", "nothing": "text",
	}
	fields := s.Fields()
	if len(fields) != len(columns) {
		t.Fatalf("%d fields, want %d", len(fields), len(columns))
	}
	var after map[string]json.RawMessage
	if err := json.Unmarshal(rec.After, &after); err != nil {
		t.Fatal(err)
	}
	text := map[string]string{"blob": `\x00ff10`, "doc": `{"a": [1, 2]}`, "ints": `{"1",NULL,"-3"}`, "price": "-1234.50",
		"Odd Name": "x", "texts": `{"a b","q\"x",NULL,"NULL","plain"}`, "at": "2024-01-31T12:34:56.123456"}
	for i, f := range fields {
		c := columns[i]
		if f.Name() != c.name {
			t.Errorf("field %d is %q, want %q", i, f.Name(), c.name)
		}
		if typ, err := f.PGType(); err != nil || typ != types[c.name] {
			t.Errorf("%s: PGType %q (%v), want %q", c.name, typ, err, types[c.name])
		}
		got, ok, err := f.AppendText(nil, after[c.name])
		if want, check := text[c.name]; check && (err != nil || !ok || string(got) != want) {
			t.Errorf("%s: AppendText(%s) = %q, %v, %v; want %q", c.name, after[c.name], got, ok, err, want)
		}
		if s.Field(c.name) != f {
			t.Errorf("Field(%q) is not the field of that name", c.name)
		}
	}
	if f := s.Field("no such column"); f != nil {
		t.Errorf("Field of an unknown column = %v, want nil", f)
	}
	if s, err := dec.Schema(nil); s != nil || err != nil {
		t.Errorf("Schema(nil) = %v, %v; want nil, nil", s, err)
	}
	if _, err := dec.Schema([]byte{0, 1}); err == nil {
		t.Error("Schema of 2 bytes: no error")
	}
}
