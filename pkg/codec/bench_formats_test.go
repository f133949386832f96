package codec

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// benchTable8 is a typical 8-column row.
func benchTable8() *change.Table {
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

func benchRow8(balance string) [][]byte {
	return [][]byte{[]byte("1234567"), []byte("Ada Lovelace"), []byte("ada.lovelace@example.com"), []byte(balance),
		[]byte("t"), []byte("0.8125"), []byte("2024-01-31 12:34:56.123456+00"), []byte("2024-02-01 08:00:00.5")}
}

// BenchmarkUpdateFormats is the whole envelope layer for one update of an 8-column row with its
// full before-image (REPLICA IDENTITY FULL), in each format: the record handed to the sink, its
// headers and arena included.
func BenchmarkUpdateFormats(b *testing.B) {
	fake := srfake.New()
	defer fake.Close()
	reg, err := schemareg.New(schemareg.Config{URL: fake.URL()})
	if err != nil {
		b.Fatal(err)
	}
	before, after := benchRow8("1234.56"), benchRow8("1300.00")
	for _, f := range Formats() {
		b.Run("format="+string(f), func(b *testing.B) {
			cfg := Config{Database: "shop", TopicPrefix: "tm", Tombstones: true, Format: f, Registry: reg}
			t := benchTable8()
			if err := cfg.Prepare(b.Context(), t); err != nil {
				b.Fatal(err)
			}
			e, err := NewEncoder(cfg, t)
			if err != nil {
				b.Fatal(err)
			}
			src := Source{LSN: 0x1_0000_0000, Xid: 7, Time: time.Now()}
			recs := make([]change.Record, 0, 4)
			b.ReportAllocs()
			for b.Loop() {
				src.Seq++
				if recs, err = e.Update(recs[:0], src, before, after, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(recs[0].Key)+len(recs[0].Value)), "record-bytes")
		})
	}
}
