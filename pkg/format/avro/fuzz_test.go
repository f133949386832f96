package avro_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/avro"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	tmavro "github.com/tidemark/cdc/pkg/format/avro"
)

// fuzzTypes are the column types the fuzzer picks from: every kind of conversion.
var fuzzTypes = []struct {
	oid uint32
	mod int32
}{
	{pgtype.Int2OID, -1}, {pgtype.Int4OID, -1}, {pgtype.Int8OID, -1}, {pgtype.OIDOID, -1},
	{pgtype.Float4OID, -1}, {pgtype.Float8OID, -1}, {pgtype.NumericOID, -1}, {pgtype.NumericOID, (10<<16 | 2) + 4},
	{790, -1}, {pgtype.BoolOID, -1}, {pgtype.TextOID, -1}, {pgtype.ByteaOID, -1}, {pgtype.BitOID, 1},
	{pgtype.VarbitOID, -1}, {pgtype.UUIDOID, -1}, {pgtype.DateOID, -1}, {pgtype.TimeOID, -1}, {pgtype.TimeOID, 3},
	{pgtype.TimetzOID, -1}, {pgtype.TimestampOID, -1}, {pgtype.TimestampOID, 3}, {pgtype.TimestamptzOID, -1},
	{pgtype.IntervalOID, -1}, {pgtype.JSONBOID, -1}, {pgtype.Int4ArrayOID, -1}, {pgtype.TextArrayOID, -1},
	{pgtype.NumericArrayOID, -1}, {pgtype.TimestamptzArrayOID, -1}, {pgtype.ByteaArrayOID, -1}, {moodOID, -1},
}

// FuzzEncode: any text under any column type encodes to a datum that twmb/avro decodes with the
// registered schema and encodes back to the same bytes, and that the decoder reads, or it is a
// ValueError; never a panic.
func FuzzEncode(f *testing.F) {
	for i, s := range []string{"42", "-1.5e10", "NaN", "-Infinity", "123456789012345678901234.5", "$1,234.56", "t",
		`\x00ff`, `a\\b\001`, "101", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "2024-01-31", "0044-03-15 BC", "infinity",
		"24:00:00", "12:34:56.5+05:30", "2024-01-31 12:34:56.123456", "2024-01-31 12:34:56.5+00", "1 year -2 mons 3 days -04:05:06.7",
		`{"a": [1]}`, "{1,NULL,-3}", `{"a b","q\"x",NULL}`, "{{1,2},{3,4}}", "[0:1]={1,2}", `{"\\x00",NULL}`, "happy", ""} {
		f.Add(uint8(i), []byte(s))
	}
	reg := srfake.New()
	f.Cleanup(reg.Close)
	cfg := testConfig(f, reg)
	dec := tmavro.NewDecoder(cfg.Registry)
	encs := make([]format.TableEncoder, len(fuzzTypes))
	for i, ft := range fuzzTypes {
		encs[i] = newEncoder(f, cfg, &change.Table{Export: change.ExportID{Schema: "public", Table: "f"}, Columns: []change.Column{
			{Name: "id", TypeOID: pgtype.Int8OID, Key: true}, {Name: "v", TypeOID: ft.oid, TypeMod: ft.mod}}})
	}
	schemas := map[uint32]*avro.Schema{}
	f.Fuzz(func(t *testing.T, pick uint8, text []byte) {
		e := encs[int(pick)%len(encs)]
		enc, err := e.Encode(nil, &format.Change{Op: change.OpCreate, After: [][]byte{[]byte("1"), text}})
		if err != nil {
			if !errors.As(err, new(*format.ValueError)) {
				t.Fatalf("%q: %v is not a ValueError", text, err)
			}
			return
		}
		value := enc.Buf[:enc.Value]
		id := uint32(value[1])<<24 | uint32(value[2])<<16 | uint32(value[3])<<8 | uint32(value[4])
		s := schemas[id]
		if s == nil {
			rs, err := cfg.Registry.Schema(t.Context(), schemaID(id))
			if err != nil {
				t.Fatal(err)
			}
			if s, err = avro.Parse(rs.Schema); err != nil {
				t.Fatal(err)
			}
			schemas[id] = s
		}
		var v any
		rest, err := s.Decode(value[5:], &v)
		if err != nil || len(rest) != 0 {
			t.Fatalf("%q: decode: %v (%d bytes left)", text, err, len(rest))
		}
		if again, err := s.Encode(v); err != nil || !bytes.Equal(again, value[5:]) {
			t.Fatalf("%q: twmb/avro encodes the decoded value differently (%v)", text, err)
		}
		var r format.Record
		if err := dec.Decode(&r, enc.Buf[enc.Value:enc.Value+enc.Key], value); err != nil {
			t.Fatalf("%q: Decode: %v", text, err)
		}
	})
}
