package formats_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/formats"
	"github.com/tidemark/cdc/pkg/format/jsonscan"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// TestEveryFormatReadsItsOwnRecords is the contract a format in All keeps: its records are
// recognised as its own, and its decoder reads back what its encoder wrote (op, source, key,
// and each value as the PostgreSQL text it came from).
func TestEveryFormatReadsItsOwnRecords(t *testing.T) {
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "t"}, Columns: []change.Column{
		{Name: "id", TypeOID: pgtype.Int4OID, TypeMod: -1, Key: true},
		{Name: "name", TypeOID: pgtype.TextOID, TypeMod: -1},
	}}
	// A registry for the formats that register their schemas (avro).
	reg, err := schemareg.New(schemareg.Config{URL: srfake.New().URL()})
	if err != nil {
		t.Fatal(err)
	}
	decoders := formats.NewDecoders(reg)
	for _, f := range formats.All {
		t.Run(f.Name(), func(t *testing.T) {
			cfg := codec.Config{TopicPrefix: "p", Database: "db", Tombstones: true,
				Format: codec.Format(f.Name()), Now: func() time.Time { return time.UnixMilli(1) }, Registry: reg}
			if err := cfg.Prepare(t.Context(), tbl); err != nil {
				t.Fatal(err)
			}
			enc, err := codec.NewEncoder(cfg, tbl)
			if err != nil {
				t.Fatal(err)
			}
			src := codec.Source{LSN: 0x1_0000_0010, Xid: 7, Seq: 3, Time: time.UnixMilli(42)}
			recs, err := enc.Update(nil, src, [][]byte{[]byte("1"), []byte("old")}, [][]byte{[]byte("2"), []byte("new")}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 3 {
				t.Fatalf("a key change made %d records, want delete, tombstone, create", len(recs))
			}
			create := recs[2]
			dec := decoders.For(create.Value)
			if reflect.TypeOf(dec) != reflect.TypeOf(f.Decoder()) {
				t.Fatalf("formats.Decoder chose %T for a %s record", dec, f.Name())
			}
			var r format.Record
			if err := dec.Decode(&r, create.Key, create.Value); err != nil {
				t.Fatal(err)
			}
			if r.Op != change.OpCreate || r.Source.LSN != src.LSN || r.Source.TxID != 7 || r.Source.Sequence != 3 ||
				r.Source.TsMs != 42 || r.Source.Table != "t" || r.Before != nil {
				t.Fatalf("decoded %+v", r)
			}
			schema, err := dec.Schema(r.Schema)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range map[string]string{"id": "2", "name": "new"} {
				var raw []byte
				jsonscan.EachField(r.After, func(n string, v []byte) {
					if n == name {
						raw = v
					}
				})
				var got []byte
				var ok bool
				if schema != nil && schema.Field(name) != nil {
					got, ok, err = schema.Field(name).AppendText(nil, raw)
				} else {
					got, ok, err = dec.AppendText(nil, raw, &format.Column{})
				}
				if err != nil || !ok || string(got) != want {
					t.Errorf("column %s: %q %v %v, want %q", name, got, ok, err, want)
				}
			}
			var key map[string]bool
			jsonscan.EachField(r.Key, func(n string, _ []byte) {
				if key == nil {
					key = map[string]bool{}
				}
				key[n] = true
			})
			if len(key) != 1 || !key["id"] {
				t.Errorf("key columns %v (key %s), want id", key, r.Key)
			}
			if old := dec.Key(recs[0].Key); string(old) == string(r.Key) {
				t.Errorf("the delete's key %s is the create's", old)
			}
		})
	}
}

// TestDecoderFallsBack: a value no format recognises goes to the default format's decoder,
// whose error says what the value lacks.
func TestDecoderFallsBack(t *testing.T) {
	dec := formats.Decoder([]byte(`{"op":"c"}`))
	if dec != formats.All[0].Decoder() {
		t.Fatalf("got %T, want the default format's decoder", dec)
	}
	var r format.Record
	if err := dec.Decode(&r, nil, []byte(`[1]`)); err == nil {
		t.Fatal("decoded an array")
	}
}
