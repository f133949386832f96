package pgjson

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

func BenchmarkAppendValue(b *testing.B) {
	cases := []struct {
		name string
		oid  uint32
		text string
	}{
		{"int8", pgtype.Int8OID, "9223372036854775807"},
		{"text", pgtype.TextOID, "The quick brown fox jumps over the lazy dog"},
		{"timestamptz", pgtype.TimestamptzOID, "2024-01-31 12:34:56.123456+00"},
		{"bytea", pgtype.ByteaOID, `\x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f`},
		{"int4 array", pgtype.Int4ArrayOID, "{1,2,3,4,5,6,7,8,9,10}"},
		{"text array", pgtype.TextArrayOID, `{"a b","q\"x",plain,NULL}`},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			text := []byte(c.text)
			dst := make([]byte, 0, 256)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = AppendValue(dst[:0], c.oid, text); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
