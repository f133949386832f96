package pgjson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// enumOID stands for any type the package does not know (an enum, a domain, citext).
const enumOID = 16_385

func TestAppendValue(t *testing.T) {
	tests := []struct {
		name string
		oid  uint32
		text string
		null bool
		want string
	}{
		{name: "null", oid: pgtype.Int4OID, null: true, want: `null`},
		{name: "null text", oid: pgtype.TextOID, null: true, want: `null`},
		{name: "int2", oid: pgtype.Int2OID, text: "-32768", want: `-32768`},
		{name: "int4", oid: pgtype.Int4OID, text: "42", want: `42`},
		{name: "int4 zero", oid: pgtype.Int4OID, text: "0", want: `0`},
		{name: "int8 max", oid: pgtype.Int8OID, text: "9223372036854775807", want: `9223372036854775807`},
		{name: "oid", oid: pgtype.OIDOID, text: "4294967295", want: `4294967295`},
		{name: "numeric", oid: pgtype.NumericOID, text: "1.50", want: `"1.50"`},
		{name: "numeric negative", oid: pgtype.NumericOID, text: "-0.000001", want: `"-0.000001"`},
		{name: "numeric NaN", oid: pgtype.NumericOID, text: "NaN", want: `"NaN"`},
		{name: "numeric Infinity", oid: pgtype.NumericOID, text: "Infinity", want: `"Infinity"`},
		{name: "numeric -Infinity", oid: pgtype.NumericOID, text: "-Infinity", want: `"-Infinity"`},
		{name: "float8", oid: pgtype.Float8OID, text: "1.5", want: `1.5`},
		{name: "float8 -0", oid: pgtype.Float8OID, text: "-0", want: `-0`},
		{name: "float8 1e+100", oid: pgtype.Float8OID, text: "1e+100", want: `1e+100`},
		{name: "float8 1e-07", oid: pgtype.Float8OID, text: "1e-07", want: `1e-07`},
		{name: "float8 full precision", oid: pgtype.Float8OID, text: "0.30000000000000004", want: `0.30000000000000004`},
		{name: "float8 NaN", oid: pgtype.Float8OID, text: "NaN", want: `"NaN"`},
		{name: "float8 Infinity", oid: pgtype.Float8OID, text: "Infinity", want: `"Infinity"`},
		{name: "float4 -Infinity", oid: pgtype.Float4OID, text: "-Infinity", want: `"-Infinity"`},
		{name: "float4 exponent", oid: pgtype.Float4OID, text: "1.2345679e+11", want: `1.2345679e+11`},
		{name: "bool true", oid: pgtype.BoolOID, text: "t", want: `true`},
		{name: "bool false", oid: pgtype.BoolOID, text: "f", want: `false`},
		{name: "text", oid: pgtype.TextOID, text: "hello", want: `"hello"`},
		{name: "text empty", oid: pgtype.TextOID, text: "", want: `""`},
		{name: "text unicode", oid: pgtype.TextOID, text: "héllo wörld ✓ 😀", want: `"héllo wörld ✓ 😀"`},
		{name: "text quotes and backslashes", oid: pgtype.TextOID, text: `say "hi" \ bye`, want: `"say \"hi\" \\ bye"`},
		{name: "text newline tab", oid: pgtype.TextOID, text: "a\nb\tc\r", want: `"a\nb\tc\r"`},
		{name: "text control chars", oid: pgtype.TextOID, text: "\x00\x01\b\f\x1f\x7f", want: `"\u0000\u0001\b\f\u001f` + "\x7f" + `"`},
		{name: "text invalid utf8", oid: pgtype.TextOID, text: "a\xffb\xc3", want: `"a\ufffdb\ufffd"`},
		{name: "varchar", oid: pgtype.VarcharOID, text: "v", want: `"v"`},
		{name: "bpchar keeps padding", oid: pgtype.BPCharOID, text: "ab ", want: `"ab "`},
		{name: "name", oid: pgtype.NameOID, text: "pg_class", want: `"pg_class"`},
		{name: "char", oid: pgtype.QCharOID, text: "x", want: `"x"`},
		{name: "unknown type falls back to string", oid: enumOID, text: "happy", want: `"happy"`},
		{name: "money falls back to string", oid: 790, text: "$100.00", want: `"$100.00"`},
		{name: "inet falls back to string", oid: pgtype.InetOID, text: "10.0.0.1/8", want: `"10.0.0.1/8"`},
		{name: "int4range falls back to string", oid: pgtype.Int4rangeOID, text: "[1,5)", want: `"[1,5)"`},
		{name: "bytea", oid: pgtype.ByteaOID, text: `\x00ff10`, want: `"AP8Q"`},
		{name: "bytea empty", oid: pgtype.ByteaOID, text: `\x`, want: `""`},
		{name: "bytea upper hex", oid: pgtype.ByteaOID, text: `\xDEADBEEF`, want: `"3q2+7w=="`},
		{name: "bytea long", oid: pgtype.ByteaOID, text: `\x` + repeat("0102030405", 20), want: `"` + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1, 2, 3, 4, 5}, 20)) + `"`},
		{name: "bytea escape format", oid: pgtype.ByteaOID, text: `a\\b\000\377`, want: `"YVxiAP8="`},
		{name: "uuid", oid: pgtype.UUIDOID, text: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", want: `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
		{name: "date", oid: pgtype.DateOID, text: "2024-01-31", want: `"2024-01-31"`},
		{name: "date infinity", oid: pgtype.DateOID, text: "infinity", want: `"infinity"`},
		{name: "date BC", oid: pgtype.DateOID, text: "0044-03-15 BC", want: `"0044-03-15 BC"`},
		{name: "time", oid: pgtype.TimeOID, text: "12:34:56.5", want: `"12:34:56.5"`},
		{name: "timetz", oid: pgtype.TimetzOID, text: "12:34:56.5+05:30", want: `"12:34:56.5+05:30"`},
		{name: "timestamp", oid: pgtype.TimestampOID, text: "2024-01-31 12:34:56.123456", want: `"2024-01-31T12:34:56.123456"`},
		{name: "timestamp infinity", oid: pgtype.TimestampOID, text: "infinity", want: `"infinity"`},
		{name: "timestamp -infinity", oid: pgtype.TimestampOID, text: "-infinity", want: `"-infinity"`},
		{name: "timestamp BC", oid: pgtype.TimestampOID, text: "0044-03-15 12:00:00 BC", want: `"0044-03-15T12:00:00 BC"`},
		{name: "timestamp year 10000", oid: pgtype.TimestampOID, text: "10000-01-01 00:00:00", want: `"10000-01-01T00:00:00"`},
		{name: "timestamptz", oid: pgtype.TimestamptzOID, text: "2024-01-31 12:34:56.123+00", want: `"2024-01-31T12:34:56.123Z"`},
		{name: "timestamptz whole second", oid: pgtype.TimestamptzOID, text: "1900-01-01 00:00:00+00", want: `"1900-01-01T00:00:00Z"`},
		{name: "timestamptz BC", oid: pgtype.TimestamptzOID, text: "0044-03-15 12:00:00+00 BC", want: `"0044-03-15T12:00:00Z BC"`},
		{name: "timestamptz other offset kept", oid: pgtype.TimestamptzOID, text: "2024-01-31 12:34:56+05:30", want: `"2024-01-31T12:34:56+05:30"`},
		{name: "timestamptz infinity", oid: pgtype.TimestamptzOID, text: "-infinity", want: `"-infinity"`},
		{name: "interval", oid: pgtype.IntervalOID, text: "1 year 2 mons -3 days +04:05:06.7", want: `"1 year 2 mons -3 days +04:05:06.7"`},
		{name: "json embedded", oid: pgtype.JSONOID, text: `{"a": [1, 2], "b": null}`, want: `{"a": [1, 2], "b": null}`},
		{name: "jsonb unicode escape kept", oid: pgtype.JSONBOID, text: `{"e": "\u00e9", "k": "é"}`, want: `{"e": "\u00e9", "k": "é"}`},
		{name: "jsonb scalar", oid: pgtype.JSONBOID, text: `"s"`, want: `"s"`},
		{name: "jsonb null", oid: pgtype.JSONBOID, text: `null`, want: `null`},
		{name: "json whitespace trimmed", oid: pgtype.JSONOID, text: " \n[1]\n ", want: `[1]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var text []byte
			if !tt.null {
				text = []byte(tt.text)
			}
			got, err := AppendValue([]byte("prefix:"), tt.oid, text)
			if err != nil {
				t.Fatalf("AppendValue(%d, %q): %v", tt.oid, tt.text, err)
			}
			if string(got) != "prefix:"+tt.want {
				t.Fatalf("AppendValue(%d, %q)\n got %s\nwant %s", tt.oid, tt.text, got[len("prefix:"):], tt.want)
			}
			if !json.Valid(got[len("prefix:"):]) {
				t.Fatalf("output %s is not valid JSON", got)
			}
		})
	}
}

func repeat(s string, n int) string {
	var b []byte
	for range n {
		b = append(b, s...)
	}
	return string(b)
}

func TestAppendValueErrors(t *testing.T) {
	tests := []struct {
		name string
		oid  uint32
		text string
	}{
		{name: "int not digits", oid: pgtype.Int4OID, text: "12a"},
		{name: "int empty", oid: pgtype.Int8OID, text: ""},
		{name: "int leading zero", oid: pgtype.Int4OID, text: "012"},
		{name: "int fraction", oid: pgtype.Int4OID, text: "1.5"},
		{name: "int lone minus", oid: pgtype.Int2OID, text: "-"},
		{name: "float junk", oid: pgtype.Float8OID, text: "1.5x"},
		{name: "float inf lowercase", oid: pgtype.Float8OID, text: "inf"},
		{name: "float dot", oid: pgtype.Float8OID, text: "1."},
		{name: "bool word", oid: pgtype.BoolOID, text: "true"},
		{name: "bytea odd hex", oid: pgtype.ByteaOID, text: `\x0`},
		{name: "bytea bad hex", oid: pgtype.ByteaOID, text: `\xzz`},
		{name: "bytea bad escape", oid: pgtype.ByteaOID, text: `\9`},
		{name: "json invalid", oid: pgtype.JSONBOID, text: `{"a":`},
		{name: "json empty", oid: pgtype.JSONOID, text: ``},
		{name: "json invalid utf8", oid: pgtype.JSONOID, text: "\"\xff\""},
		{name: "array unterminated", oid: pgtype.Int4ArrayOID, text: "{1,2"},
		{name: "array bad element", oid: pgtype.Int4ArrayOID, text: "{1,x}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("keep")
			got, err := AppendValue(dst, tt.oid, []byte(tt.text))
			if err == nil {
				t.Fatalf("AppendValue(%d, %q) = %s, want error", tt.oid, tt.text, got)
			}
			if string(got) != "keep" {
				t.Fatalf("dst changed on error: %q", got)
			}
		})
	}
}
