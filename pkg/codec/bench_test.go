package codec

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/tidemark/cdc/pkg/change"
)

// benchTable is a typical 6-column row of about 100 bytes of text.
func benchTable() *change.Table {
	return &change.Table{
		Export: change.ExportID{Schema: "public", Table: "customers"},
		Columns: []change.Column{
			{Name: "id", TypeOID: pgtype.Int8OID, Key: true},
			{Name: "name", TypeOID: pgtype.TextOID},
			{Name: "email", TypeOID: pgtype.VarcharOID},
			{Name: "balance", TypeOID: pgtype.NumericOID},
			{Name: "active", TypeOID: pgtype.BoolOID},
			{Name: "created_at", TypeOID: pgtype.TimestamptzOID},
		},
	}
}

const benchLine = "1234567\tAda Lovelace\tada.lovelace@example.com\t1234.56\tt\t2024-01-31 12:34:56.123456+00"

func benchEncoder(b *testing.B) *Encoder {
	b.Helper()
	e, err := NewEncoder(Config{Database: "shop", TopicPrefix: "tm", Tombstones: true}, benchTable())
	if err != nil {
		b.Fatal(err)
	}
	return e
}

func reportRows(b *testing.B, rows int) {
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkRead encodes one snapshot row per iteration from already split fields.
func BenchmarkRead(b *testing.B) {
	benchmarkRead(b, benchEncoder(b))
}

// benchmarkRead encodes benchLine with e once per iteration and returns the last records.
func benchmarkRead(b *testing.B, e *Encoder) []change.Record {
	row, err := SplitCopyText([]byte(benchLine), nil)
	if err != nil {
		b.Fatal(err)
	}
	src := Source{LSN: 0x1_0000_0000, Time: time.Now(), Snapshot: true, Attempt: 1}
	recs := make([]change.Record, 0, 1)
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		src.Seq++
		if recs, err = e.Read(recs[:0], src, row); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportRows(b, n)
	return recs
}

// BenchmarkCopyLineToRecord is the whole per-row snapshot path: split a COPY line, encode it.
func BenchmarkCopyLineToRecord(b *testing.B) {
	e := benchEncoder(b)
	src := Source{LSN: 0x1_0000_0000, Time: time.Now(), Snapshot: true, Attempt: 1}
	line := make([]byte, len(benchLine))
	var fields [][]byte
	recs := make([]change.Record, 0, 1)
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		copy(line, benchLine) // SplitCopyText decodes in place
		var err error
		if fields, err = SplitCopyText(line, fields); err != nil {
			b.Fatal(err)
		}
		if recs, err = e.Read(recs[:0], src, fields); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportRows(b, n)
}

func BenchmarkSplitCopyText(b *testing.B) {
	line := make([]byte, len(benchLine))
	var fields [][]byte
	b.SetBytes(int64(len(benchLine)))
	b.ReportAllocs()
	for b.Loop() {
		copy(line, benchLine)
		var err error
		if fields, err = SplitCopyText(line, fields); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadWithSchema is BenchmarkRead in json-with-schema: the schema is precomputed, so a
// row costs its payload plus copying the schema bytes.
func BenchmarkReadWithSchema(b *testing.B) {
	e, err := NewEncoder(Config{Database: "shop", TopicPrefix: "tm", Tombstones: true, Format: FormatJSONWithSchema}, benchTable())
	if err != nil {
		b.Fatal(err)
	}
	recs := benchmarkRead(b, e)
	b.ReportMetric(float64(len(recs[0].Value)), "value-bytes")
}
