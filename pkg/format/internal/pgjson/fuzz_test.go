package pgjson

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"
)

// fuzzOIDs are the types the fuzzers pick from: every type with its own mapping, their arrays,
// and an unknown type.
var fuzzOIDs = []uint32{
	pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.OIDOID, pgtype.NumericOID,
	pgtype.Float4OID, pgtype.Float8OID, pgtype.BoolOID, pgtype.TextOID, pgtype.VarcharOID,
	pgtype.BPCharOID, pgtype.NameOID, pgtype.QCharOID, pgtype.ByteaOID, pgtype.UUIDOID,
	pgtype.DateOID, pgtype.TimeOID, pgtype.TimetzOID, pgtype.TimestampOID, pgtype.TimestamptzOID,
	pgtype.IntervalOID, pgtype.JSONOID, pgtype.JSONBOID,
	pgtype.Int2ArrayOID, pgtype.Int4ArrayOID, pgtype.Int8ArrayOID, pgtype.OIDArrayOID,
	pgtype.NumericArrayOID, pgtype.Float4ArrayOID, pgtype.Float8ArrayOID, pgtype.BoolArrayOID,
	pgtype.TextArrayOID, pgtype.VarcharArrayOID, pgtype.BPCharArrayOID, pgtype.NameArrayOID,
	pgtype.QCharArrayOID, pgtype.ByteaArrayOID, pgtype.UUIDArrayOID, pgtype.DateArrayOID,
	pgtype.TimeArrayOID, pgtype.TimetzArrayOID, pgtype.TimestampArrayOID,
	pgtype.TimestamptzArrayOID, pgtype.IntervalArrayOID, pgtype.JSONArrayOID,
	pgtype.JSONBArrayOID, 16500, /* an enum: unknown to this package */
}

func FuzzAppendValue(f *testing.F) {
	seeds := []string{
		"", "0", "-1", "1e+100", "-0", "NaN", "Infinity", "t", "f", `\x00ff`, `\x`, `a\\b\000`,
		"2024-01-31 12:34:56.123+00", "0044-03-15 12:00:00+00 BC", "infinity", `{"a": "\u00e9"}`,
		"{}", "{1,2,NULL}", `{{1,2},{3,4}}`, `[0:1]={1,2}`, `{"a b","q\"x","\\x00"}`, `{NaN,-Infinity}`,
		"héllo\n\t\"\\\x00\xff", `{"{\"a\": 1}",null}`, `{{{{{{{1}}}}}}}`, `{a\`,
	}
	for i, s := range seeds {
		for j := range 4 {
			f.Add(uint8(i*4+j), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, pick uint8, text []byte) {
		oid := fuzzOIDs[int(pick)%len(fuzzOIDs)]
		got, err := AppendValue([]byte("x"), oid, text)
		if err != nil {
			if string(got) != "x" {
				t.Fatalf("AppendValue(%d, %q) changed dst on error: %q", oid, text, got)
			}
			return
		}
		v := got[1:]
		if !json.Valid(v) || !utf8.Valid(v) {
			t.Fatalf("AppendValue(%d, %q) = %q: not valid JSON", oid, text, v)
		}
		// Every string-mapped type accepts any text, and the JSON string decodes back to it
		// (for valid UTF-8).
		if KindOf(oid) == kindString && utf8.Valid(text) {
			var s string
			if err := json.Unmarshal(v, &s); err != nil || s != string(text) {
				t.Fatalf("AppendValue(%d, %q) = %s does not decode back: %q, %v", oid, text, v, s, err)
			}
		}
	})
}
