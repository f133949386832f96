package avro_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/connectjson"
	jsonfmt "github.com/tidemark/cdc/pkg/format/json"
)

// benchTable is a typical 8-column row.
func benchTable() *change.Table {
	return &change.Table{
		Export: change.ExportID{Schema: "public", Table: "customers"},
		Columns: []change.Column{
			{Name: "id", TypeOID: pgtype.Int8OID, Key: true},
			{Name: "name", TypeOID: pgtype.TextOID},
			{Name: "email", TypeOID: pgtype.VarcharOID},
			{Name: "balance", TypeOID: pgtype.NumericOID, TypeMod: (12<<16 | 2) + 4},
			{Name: "active", TypeOID: pgtype.BoolOID},
			{Name: "score", TypeOID: pgtype.Float8OID},
			{Name: "created_at", TypeOID: pgtype.TimestamptzOID},
			{Name: "updated_at", TypeOID: pgtype.TimestampOID},
		},
	}
}

func benchRow(balance string) [][]byte {
	return [][]byte{[]byte("1234567"), []byte("Ada Lovelace"), []byte("ada.lovelace@example.com"), []byte(balance),
		[]byte("t"), []byte("0.8125"), []byte("2024-01-31 12:34:56.123456+00"), []byte("2024-02-01 08:00:00.5")}
}

// benchmarkUpdate encodes an update with a full before image (REPLICA IDENTITY FULL) and its
// key, once per iteration, and reports the record's bytes.
func benchmarkUpdate(b *testing.B, e format.TableEncoder) {
	ch := &format.Change{Op: change.OpUpdate, Before: benchRow("1234.56"), After: benchRow("1300.00"), TsMs: 1700000000123,
		Source: format.Source{LSN: 0x16B374D848, Xid: 771, TsMs: 1700000000000}}
	buf := make([]byte, 0, 4096)
	var enc format.Encoded
	b.ReportAllocs()
	for b.Loop() {
		ch.Source.Seq++
		var err error
		if enc, err = e.Encode(buf[:0], ch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(enc.Value+enc.Key), "record-bytes")
}

func BenchmarkUpdate(b *testing.B) {
	reg := srfake.New()
	defer reg.Close()
	cfg := testConfig(b, reg)
	tbl := benchTable()
	b.Run("format=avro", func(b *testing.B) { benchmarkUpdate(b, newEncoder(b, cfg, tbl)) })
	for _, f := range []format.Format{jsonfmt.Format{}, connectjson.Format{}} {
		e, err := f.NewEncoder(cfg, tbl)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("format="+f.Name(), func(b *testing.B) { benchmarkUpdate(b, e) })
	}
}
