package consumer

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/watermark"
)

// fuzzLog is the model of Kafka the fuzz target reads: per topic and partition, the records in
// offset order.
type fuzzLog struct {
	recs [][]byte // values (nil: a control record)
}

// FuzzReader feeds the reader's state arbitrary watermark records (own, quiet, checkpoint, with
// any state, attempt, watermark and offsets) and data records (any commit LSN, transaction and
// sequence), and reads cuts whenever it can. Whatever the input, every cut keeps the rules:
// increasing LSNs, no change at or above the cut's LSN, none twice, and a table that was
// already in the cuts gets only changes in [Prev, LSN), so no transaction is split.
func FuzzReader(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 5, 1, 1, 3, 9, 9, 2, 0, 7, 3, 3, 1, 0, 9, 4, 3})
	f.Add([]byte{1, 1, 3, 0, 0, 5, 0, 0, 1, 2, 1, 3, 0, 0, 9, 1, 0, 3, 1, 1, 4, 1, 0, 4, 0, 3, 5, 5, 3, 4})
	f.Fuzz(fuzzReader)
}

func fuzzReader(t *testing.T, in []byte) {
	{
		exports := []change.ExportID{{Schema: "public", Table: "a"}, {Schema: "public", Table: "b"}}
		const parts = 2
		encs := map[change.ExportID]*codec.Encoder{}
		logs := map[string][]*fuzzLog{}
		for _, e := range exports {
			enc, err := codec.NewEncoder(codec.Config{TopicPrefix: "f", Tombstones: true},
				&change.Table{Export: e, Columns: []change.Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}}})
			if err != nil {
				t.Fatal(err)
			}
			encs[e] = enc
			logs[enc.Topic()] = []*fuzzLog{{}, {}}
		}
		st := newState(nil, false)
		cursors := map[string]map[int32]int64{}
		at := time.Unix(0, 0)
		i := 0
		take := func() int {
			if i >= len(in) {
				return 0
			}
			i++
			return int(in[i-1])
		}
		var lastLSN change.LSN
		delivered := map[change.ExportID]map[string]bool{}
		cuts := 0
		var whole assembler
		for i < len(in) {
			e := exports[take()%len(exports)]
			topic := encs[e].Topic()
			switch op := take() % 6; op {
			case 0, 1: // a data record
				p := take() % parts
				lsn := change.LSN(take() * 4)
				x := uint32(take() % 4)
				var recs []change.Record
				var err error
				if take()%7 == 0 {
					recs, err = encs[e].Truncate(nil, codec.Source{LSN: lsn, Xid: x})
				} else {
					recs, err = encs[e].Insert(nil, codec.Source{LSN: lsn, Xid: x, Seq: int64(take())}, [][]byte{[]byte(fmt.Sprint(take()))})
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range recs {
					if r.Partition == change.AllPartitions {
						for q := range parts {
							logs[topic][q].recs = append(logs[topic][q].recs, r.Value)
						}
						continue
					}
					logs[topic][p].recs = append(logs[topic][p].recs, r.Value)
				}
				if take()%3 == 0 {
					logs[topic][p].recs = append(logs[topic][p].recs, nil) // a commit marker
				}
			case 2: // an own record
				states := []watermark.State{watermark.StateHydrated, watermark.StateHydrated, watermark.StateHydrating, watermark.StateRemoved, watermark.StateFailed}
				r := watermark.Record{Export: e, Topic: topic, State: states[take()%len(states)], Offsets: map[int32]int64{}, Time: at,
					Snapshot: &watermark.SnapshotInfo{Attempt: 1 + take()%2, StartOffsets: map[int32]int64{}}}
				if w := take(); w > 0 {
					l := change.LSN(w * 4)
					r.Watermark = &l
				}
				for q := range int32(parts) {
					n := int64(len(logs[topic][q].recs))
					r.Offsets[q] = n - int64(take()%2)*n/2
					r.Snapshot.StartOffsets[q] = int64(take()%2) * n / 2
				}
				b, err := watermark.Encode(r)
				if err != nil {
					t.Fatal(err)
				}
				// A record no cdc writes (an attempt going back, a range going
				// backwards) is refused, and the state goes on without it.
				if err := st.addWatermark(b, ""); err != nil && !errors.Is(err, ErrContract) {
					t.Fatal(err)
				}
			case 3: // a quiet record
				l := change.LSN(take() * 4)
				var busy []change.ExportID
				if take()%2 == 0 {
					busy = append(busy, e)
				}
				b, err := watermark.EncodeQuiet(watermark.Quiet{Watermark: &l, Busy: busy, Time: at})
				if err != nil {
					t.Fatal(err)
				}
				if err := st.addWatermark(b, ""); err != nil {
					t.Fatal(err)
				}
			case 4: // a checkpoint
				b, _ := watermark.EncodeCheckpoint(change.LSN(take()*4), nil, at)
				if err := st.addWatermark(b, ""); err != nil {
					t.Fatal(err)
				}
			case 5: // read what is due: every partition being read gets what its log holds
				var cut *Cut
				for cut == nil {
					assign, unassign := st.takeAssignments()
					for tp, ps := range unassign {
						for _, q := range ps {
							delete(cursors[tp], q)
						}
					}
					for tp, ps := range assign {
						if cursors[tp] == nil {
							cursors[tp] = map[int32]int64{}
						}
						for q, off := range ps {
							cursors[tp][q] = max(off, 0)
						}
					}
					for tp, ps := range cursors {
						for q, off := range ps {
							log := logs[tp][q]
							if st.parts[tp][q] == nil {
								continue
							}
							for ; off < int64(len(log.recs)); off++ {
								v := log.recs[off]
								if err := st.addRecord(tp, q, off, v == nil, nil, v, nil); err != nil {
									t.Fatal(err)
								}
							}
							ps[q] = off
						}
					}
					part, err := st.nextPart(1+take()%5, 1<<20)
					if err != nil {
						t.Fatal(err)
					}
					if part == nil {
						break // offsets beyond the log: the cut waits
					}
					if part.Load == nil && part.Part == 0 && part.Prev != lastLSN {
						t.Fatalf("a part of a cut after %s says prev %s", lastLSN, part.Prev)
					}
					cut = whole.add(part)
				}
				if cut == nil {
					continue
				}
				cuts++
				if cut.LSN < lastLSN || cut.Prev != lastLSN {
					t.Fatalf("cut %d at %s after %s (prev %s)", cuts, cut.LSN, lastLSN, cut.Prev)
				}
				joined := map[change.ExportID]bool{}
				for _, ev := range cut.Events {
					if ev.Kind == EventJoined {
						joined[ev.Export] = true
						delivered[ev.Export] = map[string]bool{}
					}
				}
				for _, tx := range cut.Txns {
					for _, ch := range tx.Changes {
						if ch.Source.LSN >= cut.LSN {
							t.Fatalf("cut at %s holds a change at %s", cut.LSN, ch.Source.LSN)
						}
						if !joined[ch.Export] && ch.Source.LSN < cut.Prev {
							t.Fatalf("cut [%s, %s) holds a change of %s at %s: a transaction split", cut.Prev, cut.LSN, ch.Export, ch.Source.LSN)
						}
						id := fmt.Sprintf("%d/%d/%d/%d/%c/%d", ch.Partition, ch.Offset, ch.Source.LSN, ch.Source.TxID, ch.Op, ch.Source.Sequence)
						if ch.Op == change.OpTruncate {
							id = fmt.Sprintf("t/%d/%d", ch.Source.LSN, ch.Source.TxID)
						}
						if delivered[ch.Export] == nil {
							t.Fatalf("a change of %s, which never joined", ch.Export)
						}
						if delivered[ch.Export][id] {
							t.Fatalf("change %s of %s delivered twice", id, ch.Export)
						}
						delivered[ch.Export][id] = true
					}
				}
				lastLSN = cut.LSN
			}
		}
	}
}
