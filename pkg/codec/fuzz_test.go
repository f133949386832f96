package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tidemark/cdc/pkg/change"
	jsonformat "github.com/tidemark/cdc/pkg/format/json"
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
	pgtype.JSONBArrayOID, 16_385, // an enum

}

// copyEscape writes fields the way COPY ... TO does in text format.
func copyEscape(fields [][]byte) []byte {
	var b []byte
	for i, f := range fields {
		if i > 0 {
			b = append(b, '\t')
		}
		if f == nil {
			b = append(b, `\N`...)
			continue
		}
		for _, c := range f {
			switch c {
			case '\\':
				b = append(b, `\\`...)
			case '\t':
				b = append(b, `\t`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\v':
				b = append(b, `\v`...)
			default:
				b = append(b, c)
			}
		}
	}
	return b
}

func FuzzSplitCopyText(f *testing.F) {
	for _, s := range []string{
		"", "a\tb", `\N`, `\\N`, `\t\n\r\b\f\v`, `\101\x41\x4`, `\`, "\\\t", `\N` + "\t" + `\N`, "é\x01\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		orig := bytes.Clone(line)
		fields, err := SplitCopyText(line, nil)
		if err != nil {
			return
		}
		// Escaping the fields the way COPY does and splitting again gives the same fields.
		copied := make([][]byte, len(fields))
		for i, fld := range fields {
			if fld != nil {
				copied[i] = bytes.Clone(fld)
			}
		}
		again, err := SplitCopyText(copyEscape(copied), nil)
		if err != nil {
			t.Fatalf("re-split of %q: %v", copyEscape(copied), err)
		}
		if len(again) != len(copied) {
			t.Fatalf("re-split of %q: %d fields, want %d", orig, len(again), len(copied))
		}
		for i := range again {
			if (again[i] == nil) != (copied[i] == nil) || !bytes.Equal(again[i], copied[i]) {
				t.Fatalf("field %d of %q: round trip %q, want %q", i, orig, again[i], copied[i])
			}
		}
	})
}

// FuzzEncoder drives the whole record path of both stages. line is a COPY text line (the
// snapshot's input) whose fields are columns of the types picked by types (column 0 is the key).
// The same fields go through Read (snapshot, op r), Insert (replication, op c), Update (with some
// columns unchanged TOAST) and Delete. Either the encoder refuses the row, exactly when
// AppendValue refuses one of its values, or every key and value is valid JSON and valid UTF-8,
// each column of the after image is AppendValue's encoding, and the snapshot and the replication
// after images are byte-identical.
func FuzzEncoder(f *testing.F) {
	// Seeds as COPY writes them: field texts escaped, \N for NULL. Indices into fuzzOIDs.
	seed := func(types []byte, fields ...string) {
		row := make([][]byte, len(fields))
		for i, fld := range fields {
			if fld != "<NULL>" {
				row[i] = []byte(fld)
			}
		}
		f.Add(types, copyEscape(row))
	}
	seed([]byte{0, 8}, "1", "x")
	seed([]byte{1, 4, 8, 13, 18, 19, 22, 24, 31, 38, 42, 45, 46},
		"7", "1.5", "hé\\llo\ttab \"q\" 😀", `\x00ff`, "2024-01-31 12:34:56.5", "2024-01-31 12:34:56.5+00", `{"a": 1}`,
		"{1,NULL}", `[0:1]={a,"b c"}`, "{2024-01-31,infinity}", `{"0044-03-15 12:00:00+00 BC"}`, `{"{\"a\": 1}",NULL}`, "happy")
	seed([]byte{2, 5, 6}, "<NULL>", "<NULL>", "NaN")
	seed([]byte{2, 6, 6}, "-9223372036854775808", "-Infinity", "-0")
	seed([]byte{8, 6, 7}, "-9223372036854775808", "-Infinity", "-0") // bool "-0": refused
	seed([]byte{13, 24, 20}, `\x`, "{{1,2},{3,4}}", "1 year 2 mons -3 days +04:05:06.7")
	seed([]byte{}, "\xff", "\x01", `"`, "")
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, types []byte, line []byte) {
		fields, err := SplitCopyText(bytes.Clone(line), nil)
		if err != nil || len(fields) > 256 {
			return
		}
		cols := make([]change.Column, len(fields))
		want := make([][]byte, len(fields))
		refused := false
		for i := range fields {
			oid := uint32(pgtype.TextOID)
			if len(types) > 0 {
				oid = fuzzOIDs[int(types[i%len(types)])%len(fuzzOIDs)]
			}
			cols[i] = change.Column{Name: fmt.Sprintf("c%d", i), TypeOID: oid, Key: i == 0}
			if want[i], err = jsonformat.AppendValue(nil, oid, fields[i]); err != nil {
				refused = true
			}
		}
		enc, err := NewEncoder(Config{TopicPrefix: "p", Tombstones: true, Now: func() time.Time { return now }},
			&change.Table{Export: change.ExportID{Schema: "s", Table: "t"}, Columns: cols})
		if err != nil {
			return // no columns
		}
		src := Source{LSN: 42, Xid: 7, Seq: 1, Time: now}
		read, errRead := enc.Read(nil, Source{LSN: 41, Seq: 1, Time: now, Snapshot: true, Attempt: 1}, fields)
		ins, errIns := enc.Insert(nil, src, fields)
		unchanged := make([]bool, len(fields))
		for i := range unchanged {
			unchanged[i] = i > 0 && len(line) > i && line[i]&1 == 1
		}
		upd, errUpd := enc.Update(nil, src, fields, fields, unchanged)
		del, errDel := enc.Delete(nil, src, fields)
		for op, err := range map[string]error{"read": errRead, "insert": errIns, "update": errUpd, "delete": errDel} {
			if (err != nil) != refused {
				t.Fatalf("%s of %q (types %v): error %v, but AppendValue refused a value: %v", op, line, types, err, refused)
			}
		}
		if refused {
			return
		}
		var recs []change.Record
		for _, rs := range [][]change.Record{read, ins, upd, del} {
			recs = append(recs, rs...)
		}
		for _, r := range recs {
			for _, b := range [][]byte{r.Key, r.Value} {
				if b != nil && (!json.Valid(b) || !utf8.Valid(b)) {
					t.Fatalf("record of %q (types %v) is not valid JSON: %q", line, types, b)
				}
			}
		}
		var rd, in struct{ After map[string]json.RawMessage }
		if len(read) != 1 || len(ins) != 1 {
			t.Fatalf("read gave %d records, insert %d", len(read), len(ins))
		}
		if err := json.Unmarshal(read[0].Value, &rd); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(ins[0].Value, &in); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			if !bytes.Equal(rd.After[c.Name], want[i]) || !bytes.Equal(in.After[c.Name], want[i]) {
				t.Fatalf("column %s (type %d, %q): read %s, insert %s, AppendValue %s",
					c.Name, c.TypeOID, fields[i], rd.After[c.Name], in.After[c.Name], want[i])
			}
		}
	})
}
