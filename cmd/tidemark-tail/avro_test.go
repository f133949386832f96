package main

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/avro"
	"github.com/tidemark/cdc/pkg/format/formats"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// TestAvroRecordLine: an Avro record is shown as JSON through the registry; without one, as its
// bytes, quoted.
func TestAvroRecordLine(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	reg, err := schemareg.New(schemareg.Config{URL: fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	cfg := format.Config{Database: "shop", TopicPrefix: "demo", Registry: reg}
	tbl := &change.Table{Export: change.ExportID{Schema: "public", Table: "t"}, Columns: []change.Column{
		{Name: "id", TypeOID: pgtype.Int4OID, Key: true}, {Name: "d", TypeOID: pgtype.DateOID}}}
	if err := (avro.Format{}).Prepare(t.Context(), cfg, tbl); err != nil {
		t.Fatal(err)
	}
	enc, err := avro.Format{}.NewEncoder(cfg, tbl)
	if err != nil {
		t.Fatal(err)
	}
	out, err := enc.Encode(nil, &format.Change{Op: change.OpCreate, After: [][]byte{[]byte("7"), []byte("2024-01-31")},
		Source: format.Source{LSN: 16, Xid: 3, TsMs: 5}, TsMs: 6})
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: "demo.public.t", Key: out.Buf[out.Value : out.Value+out.Key], Value: out.Buf[:out.Value]}
	line, _ := appendRecord(nil, nil, r, formats.NewDecoders(reg))
	want := `demo.public.t	0	0	{"id":7}	{"before":null,"after":{"id":7,"d":"2024-01-31"},"source":{"version":"tidemark-1",` +
		`"connector":"tidemark","name":"demo","db":"shop","schema":"public","table":"t","lsn":16,"lsn_text":"0/10","txId":3,` +
		`"sequence":0,"snapshot":"false","attempt":null,"ts_ms":5},"op":"c","ts_ms":6}` + "\n"
	if string(line) != want {
		t.Errorf("line\n%s\nwant\n%s", line, want)
	}
	if line, _ := appendRecord(nil, nil, r, nil); string(line) == want {
		t.Errorf("without a registry the record was read: %s", line)
	}
}
