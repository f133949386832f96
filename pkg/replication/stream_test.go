package replication

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// pgoutput message builders (protocol version 1).

func xlog(msg []byte) []byte {
	b := []byte{pglogrepl.XLogDataByteID}
	b = binary.BigEndian.AppendUint64(b, 0)
	b = binary.BigEndian.AppendUint64(b, 0)
	b = binary.BigEndian.AppendUint64(b, 0)
	return append(b, msg...)
}

func keepalive(walEnd change.LSN) []byte {
	b := []byte{pglogrepl.PrimaryKeepaliveMessageByteID}
	b = binary.BigEndian.AppendUint64(b, uint64(walEnd))
	b = binary.BigEndian.AppendUint64(b, 0)
	return append(b, 0)
}

func begin(final change.LSN, xid uint32) []byte {
	b := []byte{'B'}
	b = binary.BigEndian.AppendUint64(b, uint64(final))
	b = binary.BigEndian.AppendUint64(b, 0)
	b = binary.BigEndian.AppendUint32(b, xid)
	return xlog(b)
}

func commit(lsn, end change.LSN) []byte {
	b := []byte{'C', 0}
	b = binary.BigEndian.AppendUint64(b, uint64(lsn))
	b = binary.BigEndian.AppendUint64(b, uint64(end))
	b = binary.BigEndian.AppendUint64(b, 0)
	return xlog(b)
}

func relationMsg(id uint32, schema, table string) []byte {
	b := []byte{'R'}
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(append(b, schema...), 0)
	b = append(append(b, table...), 0)
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint16(b, 2)
	b = append(b, 1)
	b = append(append(b, "id"...), 0)
	b = binary.BigEndian.AppendUint32(b, 23) // int4
	b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	b = append(b, 0)
	b = append(append(b, "v"...), 0)
	b = binary.BigEndian.AppendUint32(b, 25) // text
	b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
	return xlog(b)
}

func tuple(b []byte, vals ...string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(vals)))
	for _, v := range vals {
		b = append(b, 't')
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

func insert(rel uint32, id, v string) []byte {
	b := []byte{'I'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	return xlog(tuple(b, id, v))
}

type fakeHooks struct{}

func (fakeHooks) KeyColumns(context.Context, change.ExportID) ([]string, error) { return nil, nil }

var (
	tA = change.ExportID{Schema: "public", Table: "a"}
	tB = change.ExportID{Schema: "public", Table: "b"}
)

// newTestStream returns a stream state with exports a (hydrated, replay below 'replay') and b
// (holding), both relations known, and the units it emits.
func newTestStream(t *testing.T, replay change.LSN) (*streamState, chan *change.Unit) {
	t.Helper()
	s := New(Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true}, SpillDir: t.TempDir(), HoldMemory: 1 << 20}, fakeHooks{})
	s.Resume(map[change.ExportID]change.LSN{tA: replay})
	out := make(chan *change.Unit, 1000)
	st := s.state
	st.ctx, st.out = t.Context(), out
	st.detect([]change.ExportID{tB})
	feed(t, st, relationMsg(1, "public", "a"), relationMsg(2, "public", "b"))
	return st, out
}

func feed(t *testing.T, st *streamState, msgs ...[]byte) {
	t.Helper()
	for _, m := range msgs {
		if err := st.handle(m); err != nil {
			t.Fatalf("handle: %v", err)
		}
	}
}

func drain(out chan *change.Unit) []*change.Unit {
	var us []*change.Unit
	for {
		select {
		case u := <-out:
			us = append(us, u)
		default:
			return us
		}
	}
}

func afterID(t *testing.T, r change.Record) string {
	t.Helper()
	var env struct {
		After map[string]json.RawMessage `json:"after"`
	}
	if err := json.Unmarshal(r.Value, &env); err != nil {
		t.Fatal(err)
	}
	return string(env.After["id"])
}

func TestStreamRouting(t *testing.T) {
	st, out := newTestStream(t, 0x200)

	// Replayed transaction of a (commit below its own position): dropped.
	feed(t, st, begin(0x100, 1), insert(1, "1", "old"), commit(0x100, 0x108))
	// Transaction touching a and b: a published, b held (C unknown yet).
	feed(t, st, begin(0x300, 2), insert(1, "2", "x"), insert(2, "20", "y"), commit(0x300, 0x308))
	// b's consistent point: held changes below it are dropped.
	st.setConsistentPoint([]change.ExportID{tB}, 0x400)
	feed(t, st, begin(0x500, 3), insert(2, "21", "z"), commit(0x500, 0x508))
	// A keepalive inside a transaction does not move the position; one outside does.
	feed(t, st, begin(0x600, 4), keepalive(0x9000), insert(1, "3", "w"), commit(0x600, 0x608))
	if st.pos != 0x608 {
		t.Fatalf("stream position %s after a keepalive inside a transaction, want 0/608", st.pos)
	}
	feed(t, st, keepalive(0x700))
	if st.pos != 0x700 {
		t.Fatalf("stream position %s after an idle keepalive, want 0/700", st.pos)
	}

	units := drain(out)
	if len(units) != 2 || units[0].Kind != change.KindTxn || units[1].Kind != change.KindTxn {
		t.Fatalf("units = %v, want two transactions of a", kinds(units))
	}
	if got := afterID(t, units[0].Records[0]); got != "2" || units[0].End != 0x308 {
		t.Fatalf("first unit: id %s end %s, want id 2 end 0/308", got, units[0].End)
	}
	if st.routes[tB].hold.Len() != 1 {
		t.Fatalf("b holds %d transactions, want 1 (the one at or above C)", st.routes[tB].hold.Len())
	}

	// Copy durable: at the next yield b's held transaction is released, then b is hydrated,
	// then progress.
	st.copyDone(tB)
	if err := st.yield(); err != nil {
		t.Fatal(err)
	}
	units = drain(out)
	if got := kinds(units); len(got) != 3 || got[0] != change.KindHeld || got[1] != change.KindHydrated || got[2] != change.KindProgress {
		t.Fatalf("after copy done: %v, want held, hydrated, progress", got)
	}
	if afterID(t, units[0].Records[0]) != "21" || units[1].End != 0x700 || units[2].End != 0x700 {
		t.Fatalf("released %s, hydrated at %s, progress %s", afterID(t, units[0].Records[0]), units[1].End, units[2].End)
	}
	// From now on b's changes flow directly.
	feed(t, st, begin(0x800, 5), insert(2, "22", "q"), commit(0x800, 0x808))
	units = drain(out)
	if len(units) != 1 || units[0].Kind != change.KindTxn || afterID(t, units[0].Records[0]) != "22" {
		t.Fatalf("after hydration: %v", kinds(units))
	}
}

func TestStreamRemove(t *testing.T) {
	st, out := newTestStream(t, 0)
	st.remove(tA, 0x500)
	feed(t, st, begin(0x400, 1), insert(1, "1", "still routed"), commit(0x400, 0x408))
	if err := st.yield(); err != nil {
		t.Fatal(err)
	}
	feed(t, st, begin(0x600, 2), insert(1, "2", "after removal"), commit(0x600, 0x608))
	if err := st.yield(); err != nil {
		t.Fatal(err)
	}
	got := kinds(drain(out))
	want := []change.Kind{change.KindTxn, change.KindTxn, change.KindRemoved}
	if len(got) != len(want) {
		t.Fatalf("units %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("units %v, want %v", got, want)
		}
	}
	// Removed: later changes are dropped.
	feed(t, st, begin(0x700, 3), insert(1, "3", "gone"), commit(0x700, 0x708))
	for _, u := range drain(out) {
		if u.Kind == change.KindTxn {
			t.Fatalf("change of a removed export published")
		}
	}
}

func kinds(us []*change.Unit) []change.Kind {
	out := make([]change.Kind, len(us))
	for i, u := range us {
		out[i] = u.Kind
	}
	return out
}

func TestParsePGDuration(t *testing.T) {
	tests := map[string]time.Duration{"60s": time.Minute, "1min": time.Minute, "0": 0, "500ms": 500 * time.Millisecond, "2h": 2 * time.Hour}
	for in, want := range tests {
		got, err := parsePGDuration(in)
		if err != nil || got != want {
			t.Errorf("parsePGDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parsePGDuration("5 parsecs"); err == nil {
		t.Error("want error for an unknown unit")
	}
}

// relationIdent is relationMsg with replica identity ident, and id flagged as key or not.
func relationIdent(id uint32, schema, table string, ident byte, keyed bool) []byte {
	m := relationMsg(id, schema, table)
	b := m[25:] // after the XLogData header
	i := 1 + 4 + len(schema) + 1 + len(table) + 1
	b[i] = ident
	if !keyed {
		b[i+3] = 0 // flags of the first column (id)
	}
	return m
}

func TestStreamKeyLost(t *testing.T) {
	st, out := newTestStream(t, 0)
	// A Relation message that keeps a key changes nothing for the export.
	feed(t, st, begin(0x300, 1), relationIdent(1, "public", "a", 'i', true), insert(1, "1", "x"), commit(0x300, 0x308))
	if got := kinds(drain(out)); len(got) != 1 || got[0] != change.KindTxn {
		t.Fatalf("after a relation that keeps its key: %v, want one transaction", got)
	}
	// The key is gone (primary key dropped, replica identity nothing): a alone fails, after
	// the transaction, whose other records go on.
	feed(t, st, begin(0x400, 2), relationIdent(1, "public", "a", 'n', false), insert(1, "2", "y"), commit(0x400, 0x408))
	units := drain(out)
	if got := kinds(units); len(got) != 1 || got[0] != change.KindFailed {
		t.Fatalf("after the key was lost: %v, want one failed unit", got)
	}
	if units[0].Export != tA || units[0].End != 0x408 || !strings.Contains(units[0].Err, "lost its key") || !strings.Contains(units[0].Err, "NOTHING") {
		t.Fatalf("failed unit: export %v end %s err %q", units[0].Export, units[0].End, units[0].Err)
	}
	// Later changes of a are dropped.
	feed(t, st, begin(0x500, 3), insert(1, "3", "z"), commit(0x500, 0x508))
	if got := kinds(drain(out)); len(got) != 0 {
		t.Fatalf("after a failed: %v, want nothing", got)
	}
}
