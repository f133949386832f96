package replication

import "context"

// The transactions the stream delivered, for the start of a chunked copy. A transaction whose
// commit record the stream delivered before an export's copy started (StartChunking) may still
// be in the proc array when the copy's first chunks take their snapshots (PostgreSQL writes the
// commit record before it takes the xid out of the proc array; a wait for a synchronous standby
// can hold it there for as long as the standby is away). Its changes of the export were not
// published by the copy's merge (a new export is not routed before StartChunking; a re-copied
// one was published directly, without its keys being noted), so a chunk that does not see it
// would publish the row from before it: lost for a new export, stale for a re-copy. The stage
// keeps the xids of the last streamedCap transactions it delivered; the chunker takes them
// when a copy starts (Streamed) and reads a chunk again once its snapshot sees every one of
// them that it missed. Transactions delivered after that are the merge's business (recent).

// streamedCap bounds the xids kept (256 KiB): a transaction delivered more than that many
// transactions before a copy starts is not waited for.
const streamedCap = 1 << 16

// xidRing holds the xids of the last streamedCap transactions delivered.
type xidRing struct {
	xids []uint32
	next int
}

func (r *xidRing) add(xid uint32) {
	if len(r.xids) < streamedCap {
		r.xids = append(r.xids, xid)
		return
	}
	r.xids[r.next] = xid
	r.next = (r.next + 1) % streamedCap
}

// from returns the xids not below x, in a new slice.
func (r *xidRing) from(x uint32) []uint32 {
	var out []uint32
	for _, xid := range r.xids {
		if int32(xid-x) >= 0 {
			out = append(out, xid)
		}
	}
	return out
}

// Streamed returns the xids of the transactions the stream delivered so far (the last
// streamedCap of them) that are not below from (in the 32-bit xids' circular order), once the
// commands posted before it are applied: called after StartChunking, with from a snapshot's
// xmin, it holds every transaction delivered before the copy started that is recent enough to
// matter and that the snapshot may not see (it sees every xid below its xmin), usually a few.
func (s *Stage) Streamed(ctx context.Context, from uint32) ([]uint32, error) {
	reply := make(chan []uint32, 1)
	s.post(func(st *streamState) { reply <- st.streamed.from(from) })
	select {
	case xids := <-reply:
		return xids, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
