package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// newTestExport builds the in-memory state a worker needs to encode rows of a two-column table.
func newTestExport(tb testing.TB, batchRows, batchBytes int) (*worker, *exportState, chan *change.Unit) {
	tb.Helper()
	table := &change.Table{
		Export: change.ExportID{Schema: "public", Table: "t"},
		OID:    1,
		Columns: []change.Column{
			{Name: "id", TypeOID: 23, TypeMod: -1, Key: true},
			{Name: "note", TypeOID: 25, TypeMod: -1},
		},
	}
	enc, err := codec.NewEncoder(codec.Config{TopicPrefix: "p"}, table)
	if err != nil {
		tb.Fatalf("NewEncoder: %v", err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &Stage{cfg: Config{BatchRows: batchRows, BatchBytes: batchBytes}, log: log, metrics: newMetrics(nil)}
	out := make(chan *change.Unit, 1000)
	e := &exportState{id: table.Export, table: table, enc: enc, attempt: 3}
	e.progress = newProgress(e.id.String(), 10, s.metrics, newNotices(log), log, time.Hour, time.Now())
	r := &request{s: s, c: 0x1000, start: time.Unix(100, 0), out: out, exports: map[change.ExportID]*exportState{e.id: e}}
	w := &worker{s: s, r: r, encs: map[*exportState]*codec.Encoder{}}
	return w, e, out
}

func TestRowWriterSplitsLinesAcrossWrites(t *testing.T) {
	var stream strings.Builder
	want := map[string]string{}
	for i := range 50 {
		note := fmt.Sprintf("row %d with a tab\\tand newline\\n and ünïcode", i)
		if i%7 == 0 {
			stream.WriteString(fmt.Sprintf("%d\t\\N\n", i))
			want[fmt.Sprint(i)] = "<null>"
			continue
		}
		stream.WriteString(fmt.Sprintf("%d\t%s\n", i, note))
		want[fmt.Sprint(i)] = strings.NewReplacer(`\t`, "\t", `\n`, "\n").Replace(note)
	}
	data := []byte(stream.String())

	tests := []struct {
		name  string
		chunk int
	}{
		{name: "one write", chunk: len(data)},
		{name: "one byte per write", chunk: 1},
		{name: "odd chunks", chunk: 7},
		{name: "larger chunks", chunk: 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, e, out := newTestExport(t, 8, 1<<20)
			rw := &rowWriter{w: w, e: e, ctx: t.Context()}
			for off := 0; off < len(data); off += tt.chunk {
				// The connection reuses its buffer: hand out a copy and scribble over it after.
				chunk := []byte(string(data[off:min(off+tt.chunk, len(data))]))
				if _, err := rw.Write(chunk); err != nil {
					t.Fatalf("Write: %v", err)
				}
				for i := range chunk {
					chunk[i] = 'X'
				}
			}
			if len(rw.buf) != 0 {
				t.Fatalf("%d bytes left over after the last line", len(rw.buf))
			}
			if err := rw.flush(); err != nil {
				t.Fatalf("flush: %v", err)
			}
			if rw.codecErr != nil {
				t.Fatalf("codec error: %v", rw.codecErr)
			}
			close(out)
			got := map[string]string{}
			units := 0
			for u := range out {
				units++
				if u.Kind != change.KindSnapshot || u.Attempt != 3 || u.Export != e.id || u.Rows != len(u.Records) {
					t.Fatalf("unit %+v: wrong kind, attempt, export or row count", u)
				}
				if u.Rows > 8 {
					t.Fatalf("unit has %d rows, batch limit is 8", u.Rows)
				}
				for _, rec := range u.Records {
					var env struct {
						After  map[string]any `json:"after"`
						Op     string         `json:"op"`
						Source struct {
							LSN      uint64 `json:"lsn"`
							Snapshot any    `json:"snapshot"`
						} `json:"source"`
					}
					if err := json.Unmarshal(rec.Value, &env); err != nil {
						t.Fatalf("envelope %s: %v", rec.Value, err)
					}
					if env.Op != "r" || env.Source.LSN != 0x1000-1 {
						t.Fatalf("envelope op %q lsn %d, want r and %d", env.Op, env.Source.LSN, 0x1000-1)
					}
					id := fmt.Sprint(env.After["id"])
					note, ok := env.After["note"].(string)
					if env.After["note"] == nil {
						note, ok = "<null>", true
					}
					if !ok {
						t.Fatalf("note of %s is %T", id, env.After["note"])
					}
					if _, dup := got[id]; dup {
						t.Fatalf("row %s twice", id)
					}
					got[id] = note
				}
			}
			if len(got) != len(want) {
				t.Fatalf("got %d rows, want %d", len(got), len(want))
			}
			for id, note := range want {
				if got[id] != note {
					t.Fatalf("row %s note %q, want %q", id, got[id], note)
				}
			}
			if units != (len(want)+7)/8 {
				t.Fatalf("%d units, want %d", units, (len(want)+7)/8)
			}
		})
	}
}

func TestRowWriterBatchBytes(t *testing.T) {
	w, e, out := newTestExport(t, 1000, 1) // every row exceeds the byte bound
	rw := &rowWriter{w: w, e: e, ctx: t.Context()}
	if _, err := rw.Write([]byte("1\ta\n2\tb\n3\tc\n")); err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 {
		t.Fatalf("%d units, want one per row", len(out))
	}
}

func TestRowWriterBadLineDiscardsRest(t *testing.T) {
	w, e, out := newTestExport(t, 1, 1<<20)
	rw := &rowWriter{w: w, e: e, ctx: t.Context()}
	if _, err := rw.Write([]byte("1\ta\nonly-one-field\n3\tc\n")); err != nil {
		t.Fatalf("Write must not fail the COPY: %v", err)
	}
	if rw.codecErr == nil || !rw.discard {
		t.Fatalf("want a codec error and discarding, got %v / %v", rw.codecErr, rw.discard)
	}
	if len(out) != 1 {
		t.Fatalf("%d units, want only the row before the bad line", len(out))
	}
}

func TestRowWriterBlockedSendRespectsContext(t *testing.T) {
	w, e, _ := newTestExport(t, 1, 1<<20)
	w.r.out = make(chan *change.Unit) // nobody reads
	ctx, cancel := context.WithCancel(t.Context())
	rw := &rowWriter{w: w, e: e, ctx: ctx}
	errc := make(chan error, 1)
	go func() {
		_, err := rw.Write([]byte("1\ta\n"))
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("Write returned nil after cancel, want the context error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Write stayed blocked after cancel")
	}
}

func TestCopySQL(t *testing.T) {
	e := &exportState{
		id: change.ExportID{Schema: "Säles", Table: `Or"der`},
		table: &change.Table{Columns: []change.Column{
			{Name: "id"}, {Name: "Mixed Case"}, {Name: `q"t`},
		}},
	}
	got := e.copySQL(Range{Start: 4, End: 8})
	want := `COPY (SELECT "id", "Mixed Case", "q""t" FROM ONLY "Säles"."Or""der" WHERE ctid >= '(4,0)'::tid AND ctid < '(8,0)'::tid) TO STDOUT`
	if got != want {
		t.Fatalf("copySQL =\n%s\nwant\n%s", got, want)
	}
	if got := e.copySQL(Range{Open: true}); strings.Contains(got, "WHERE") {
		t.Fatalf("whole-table copy has a WHERE: %s", got)
	}
	e.stats.relkind = "p"
	if got := e.copySQL(Range{Open: true}); strings.Contains(got, "ONLY") {
		t.Fatalf("partitioned table copy reads ONLY the parent: %s", got)
	}
	// The publication's row filter applies to every range.
	e.stats.relkind = "r"
	e.table.Published.RowFilter = "(region = 'eu'::text OR id > 10)"
	want = `COPY (SELECT "id", "Mixed Case", "q""t" FROM ONLY "Säles"."Or""der" WHERE ctid >= '(4,0)'::tid AND ctid < '(8,0)'::tid AND ((region = 'eu'::text OR id > 10))) TO STDOUT`
	if got := e.copySQL(Range{Start: 4, End: 8}); got != want {
		t.Fatalf("filtered copySQL =\n%s\nwant\n%s", got, want)
	}
	if got := e.copySQL(Range{Open: true}); !strings.HasSuffix(got, ` WHERE ((region = 'eu'::text OR id > 10))) TO STDOUT`) {
		t.Fatalf("filtered whole-table copy: %s", got)
	}
}
