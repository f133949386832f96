package replication

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

var (
	tC = change.ExportID{Schema: "public", Table: "c"}
	tD = change.ExportID{Schema: "public", Table: "d"}
)

// fixedNow is the clock of the records' ts_ms: the runs compared write the same bytes.
func fixedNow() time.Time { return time.Unix(1700000000, 0) }

// keyUpdate is an update of rel from key old to key id (the old key tuple, then the new row).
func keyUpdate(rel uint32, old, id, v string) []byte {
	b := []byte{'U'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'K')
	b = binary.BigEndian.AppendUint16(b, 2)
	b = append(b, 't')
	b = binary.BigEndian.AppendUint32(b, uint32(len(old)))
	b = append(b, old...)
	b = append(b, 'n', 'N')
	return xlog(tuple(b, id, v))
}

// toastUpdate is an update of rel whose second column is an unchanged out-of-line value.
func toastUpdate(rel uint32, id string) []byte {
	b := []byte{'U'}
	b = binary.BigEndian.AppendUint32(b, rel)
	b = append(b, 'N')
	b = binary.BigEndian.AppendUint16(b, 2)
	b = append(b, 't')
	b = binary.BigEndian.AppendUint32(b, uint32(len(id)))
	b = append(b, id...)
	return xlog(append(b, 'u'))
}

// streamRun is a stream with workers or without: its exports and what it is fed.
type streamRun struct {
	cfg   Config
	setup func(s *Stage)
	msgs  [][]byte
	// after runs once the loop ended (on the loop's goroutine's state, the loop being done).
	after func(st *streamState) error
}

// run feeds the messages to the stream loop (all of them waiting before it starts, so that it
// reaches no yield point before the end) and returns the units emitted, rendered, and how the
// loop ended.
// With wait, the stream goroutine never takes a batch back: the workers encode every change
// it hands them.
func (r streamRun) run(t *testing.T, encoders int, wait bool) (units []string, end string, used int64) {
	t.Helper()
	cfg := r.cfg
	cfg.SpillDir = t.TempDir()
	s := New(cfg, fuzzHooks{})
	st := s.state
	st.waitWorkers = wait
	defer st.close()
	r.setup(s)
	in := make(chan []byte, len(r.msgs))
	for _, m := range r.msgs {
		in <- m
	}
	close(in)
	out := make(chan *change.Unit, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for u := range out {
			units = append(units, renderUnit(u))
			if u.Claim != nil {
				u.Claim.Return()
			}
		}
	}()
	var err error
	if encoders > 0 {
		err = st.loopAhead(t.Context(), in, out, encoders)
	} else {
		err = st.loop(t.Context(), in, out)
	}
	end = fmt.Sprint(err)
	if err == nil && r.after != nil {
		end = fmt.Sprint(r.after(st))
	}
	end += "\n" + renderState(st)
	close(out)
	<-done
	return units, end, st.preUsed
}

// renderUnit writes every field of u that the sink reads (not its Claim).
func renderUnit(u *change.Unit) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v %v commit=%v end=%v xid=%d time=%d rows=%d err=%q", u.Kind, u.Export, u.Commit, u.End, u.Xid, u.Time.UnixMicro(), u.Rows, u.Err)
	if u.Piece != nil {
		fmt.Fprintf(&b, " piece=%+v", *u.Piece)
	}
	for _, r := range u.Records {
		fmt.Fprintf(&b, "\n  %s/%d key=%q value=%q nil=%v", r.Topic, r.Partition, r.Key, r.Value, r.Value == nil)
		for _, h := range r.Headers {
			fmt.Fprintf(&b, " %s=%q", h.Key, h.Value)
		}
	}
	return b.String()
}

// renderState writes the stream state the units do not show: positions, routes and the keys
// noted for chunked copies.
func renderState(st *streamState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pos=%v emitted=%v partial=%+v", st.pos, st.emitted, st.partial)
	for _, e := range []change.ExportID{tA, tB, tC, tD} {
		r := st.routes[e]
		if r == nil {
			continue
		}
		fmt.Fprintf(&b, "\n%v mode=%v", e, r.mode)
		if r.chunks != nil {
			fmt.Fprintf(&b, " recent=%v", r.chunks.recent)
			for seq, w := range r.chunks.windows {
				fmt.Fprintf(&b, " window %d: open=%v touched=%v truncated=%v pending=%v", seq, w.open, w.touched, w.truncated, w.pending)
			}
		}
	}
	return b.String()
}

// generatedStream is a seeded stream of many transactions on four tables: a and c hydrated, b
// held (released at the end), d copied in chunks with a window open, and a table that is not
// published; inserts, updates (some changing the key, some leaving a TOAST value unchanged),
// deletes, truncates, Relation messages repeated inside transactions, keepalives, transactions
// large enough to be published in pieces, and a change that does not encode (c fails there).
func generatedStream(seed uint64) streamRun {
	rng := rand.New(rand.NewPCG(seed, 1))
	rels := []struct {
		id   uint32
		name string
	}{{1, "a"}, {2, "b"}, {3, "c"}, {4, "d"}, {5, "u"}}
	var msgs [][]byte
	for _, r := range rels {
		msgs = append(msgs, relationMsg(r.id, "public", r.name))
	}
	lsn := change.LSN(0x1000)
	for i := range 300 {
		n := 1 + rng.IntN(12)
		if rng.IntN(20) == 0 {
			n = 200 + rng.IntN(200) // past the piece bound
		}
		msgs = append(msgs, begin(lsn, uint32(1000+i)))
		if i == 40 {
			msgs = append(msgs, markerMsg(lsn, change.ChunkMarker(testTag, 7, false)))
		}
		for range n {
			msgs = append(msgs, randomChange(rng, rels[rng.IntN(len(rels))].id, i))
			if rng.IntN(400) == 0 {
				r := rels[rng.IntN(len(rels))]
				msgs = append(msgs, relationMsg(r.id, "public", r.name))
			}
		}
		if i == 250 {
			msgs = append(msgs, insert(3, "not a number", "x")) // c fails here
		}
		msgs = append(msgs, commit(lsn, lsn+8))
		if rng.IntN(10) == 0 {
			msgs = append(msgs, keepalive(lsn+16))
		}
		lsn += 0x100
	}
	return streamRun{
		cfg: Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true, Now: fixedNow}, HoldMemory: 16 << 10,
			PieceBytes: 16 << 10, MarkerTag: testTag},
		setup: func(s *Stage) {
			s.Resume(map[change.ExportID]change.LSN{tA: 0, tC: 0, tD: 0})
			st := s.state
			st.detect([]change.ExportID{tB})
			if err := st.setConsistentPoint([]change.ExportID{tB}, 0x2000); err != nil {
				panic(err)
			}
			st.startChunking(tD, 0)
			st.openWindow(7, tD, 0)
		},
		msgs: msgs,
		after: func(st *streamState) error {
			st.copyDone(tB)
			return st.yield()
		},
	}
}

func randomChange(rng *rand.Rand, rel uint32, i int) []byte {
	id := fmt.Sprint(rng.IntN(50))
	v := strings.Repeat("v", rng.IntN(300)) + fmt.Sprintf(" %d \"é\"", i)
	switch k := rng.IntN(100); {
	case k < 50:
		return insert(rel, id, v)
	case k < 70:
		return update(rel, id, v)
	case k < 80:
		return keyUpdate(rel, id, fmt.Sprint(rng.IntN(50)), v)
	case k < 85:
		return toastUpdate(rel, id)
	case k < 99:
		return deleteMsg(rel, id)
	default:
		return truncateMsg(rel)
	}
}

// corpusStream is FuzzDecode's set-up (a hydrated, b held) over one corpus input.
func corpusStream(t *testing.T, data []byte) streamRun {
	t.Helper()
	var msgs [][]byte
	for i, fr := range splitFrames(data) {
		if i == maxFuzzFrames {
			break
		}
		if len(fr) == 0 || (fr[0] != pglogrepl.XLogDataByteID && fr[0] != pglogrepl.PrimaryKeepaliveMessageByteID) {
			fr = xlog(fr)
		}
		msgs = append(msgs, fr)
	}
	return streamRun{
		cfg: Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true, MaxRecordBytes: 1 << 20, Now: fixedNow}, HoldMemory: 4 << 10},
		setup: func(s *Stage) {
			s.Resume(map[change.ExportID]change.LSN{tA: 0})
			s.state.detect([]change.ExportID{tB})
			if err := s.state.setConsistentPoint([]change.ExportID{tB}, 0); err != nil {
				t.Fatal(err)
			}
		},
		msgs: msgs,
		after: func(st *streamState) error {
			st.copyDone(tB)
			return st.yield()
		},
	}
}

// sameAsInline runs r without workers and with 1 and 3 (waiting for the workers, and taking
// batches back as the stage does), and fails unless the units and the final state are the
// same, byte for byte. It returns the units and how many row changes the workers encoded in the
// two runs that wait for them.
func sameAsInline(t *testing.T, r streamRun) ([]string, int64) {
	t.Helper()
	want, wantEnd, _ := r.run(t, 0, false)
	var used int64
	for _, run := range []struct {
		workers int
		wait    bool
	}{{1, true}, {3, true}, {1, false}, {3, false}} {
		workers := run.workers
		got, gotEnd, u := r.run(t, workers, run.wait)
		if run.wait {
			used += u
		}
		if gotEnd != wantEnd {
			t.Fatalf("%d workers: the stream ended with\n%s\nwithout workers:\n%s", workers, short(gotEnd), short(wantEnd))
		}
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Fatalf("%d workers: unit %d of %d is\n%s\nwithout workers (%d units):\n%s", workers, i, len(got), short(g), len(want), short(w))
			}
		}
	}
	return want, used
}

// short cuts s for a failure message.
func short(s string) string {
	if len(s) > 3000 {
		return s[:3000] + "..."
	}
	return s
}

// TestEncodersSameAsInline: with encode workers, the stream emits the units it emits without
// them (the same records in the same order, the same pieces, failures and positions) and
// leaves the same state, over generated streams of many transactions and tables.
func TestEncodersSameAsInline(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			units, used := sameAsInline(t, generatedStream(seed))
			// Most row changes reach the stream goroutine encoded by a worker (the others
			// follow a Relation message read ahead, or a failed export).
			t.Logf("the workers encoded %d row changes of the two runs that wait for them", used)
			if used < 4000 {
				t.Errorf("the workers encoded %d row changes of the two runs", used)
			}
			// The stream exercised what it is meant to.
			all := strings.Join(units, "\n")
			for _, want := range []string{"piece={Index:1", "failed public.c", "held public.b", "tidemark.old_key", "hydrated public.b", "op=\"t\""} {
				if !strings.Contains(all, want) {
					t.Errorf("no %q in the units", want)
				}
			}
		})
	}
}

// TestEncodersSameAsInlineCorpus runs FuzzDecode's corpus (captured sessions, hostile
// messages) with and without workers: the same units, the same end (errors included).
func TestEncodersSameAsInlineCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzDecode")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 10 {
		t.Fatalf("%d corpus entries in %s", len(entries), dir)
	}
	for _, e := range entries {
		t.Run(e.Name(), func(t *testing.T) {
			_, _ = sameAsInline(t, corpusStream(t, readCorpusEntry(t, filepath.Join(dir, e.Name()))))
		})
	}
}
