package change

import (
	"slices"
	"strconv"
	"strings"
)

// KeyRange is a range of a table's key, in the key's sort order: the keys after From (nil: from
// the first key) up to and including To (nil: to the last key). Each bound holds the text form
// of every key column, as PostgreSQL renders it.
type KeyRange struct {
	From []string `json:"from"`
	To   []string `json:"to"`
}

// Chunk describes one chunk of a chunked copy. A KindChunk unit carries it with the chunk's rows.
type Chunk struct {
	// ID names the chunk within the process; its WAL markers carry it.
	ID uint64
	// Seq orders the chunks of one export's copy in this process, from 0, in key order: the
	// replication stage publishes them in this order.
	Seq   int
	Range KeyRange
	// Read is the number of rows the chunk read. The unit's Rows are those it publishes: rows
	// whose key the stream changed while the chunk was in flight are left to the stream.
	Read int
	// Estimated is the table's estimated rows when its copy was set up (pg_class).
	Estimated int64
	// Snapshot says which transactions the chunk's read saw (nil: unknown, taken as all that
	// committed before its low marker).
	Snapshot *XidSnapshot
}

// XidSnapshot is the part of a PostgreSQL snapshot that says which committed transactions it
// sees (pg_current_snapshot): those with an xid below Xmax and not in Xip. Xids are the 32-bit
// ones pgoutput sends in Begin (the low half of an xid8), compared in PostgreSQL's circular
// order.
//
// A chunk needs it because a transaction's commit record precedes the moment it stops counting
// as running (PostgreSQL writes the record, then takes the xid out of the proc array): the
// stream can deliver a transaction before a chunk's low marker that the chunk's snapshot, taken
// after the marker, still sees as running.
type XidSnapshot struct {
	Xmin, Xmax uint32
	// Xip are the transactions running when the snapshot was taken, with xids below Xmax.
	// On a hot standby PostgreSQL does not list them (they are all subtransactions to it), so
	// only Xmax counts there.
	Xip []uint32
}

// Sees reports whether the snapshot sees the changes of a transaction that committed with xid.
// A nil snapshot sees every transaction.
func (s *XidSnapshot) Sees(xid uint32) bool {
	switch {
	case s == nil || int32(xid-s.Xmin) < 0:
		return true // not running when the snapshot was taken
	case int32(xid-s.Xmax) >= 0:
		return false
	}
	return !slices.Contains(s.Xip, xid)
}

// Last reports whether the chunk reaches the table's last key.
func (c *Chunk) Last() bool { return c.Range.To == nil }

// MarkerPrefix is the prefix of the WAL messages (pg_logical_emit_message) that mark a chunk's
// window.
const MarkerPrefix = "tidemark"

// ChunkMarker is the content of the low or high marker of chunk id. tag names the process that
// writes it (several instances, or earlier lives of one, may write markers into the same WAL).
func ChunkMarker(tag string, id uint64, high bool) string {
	side := "low"
	if high {
		side = "high"
	}
	return tag + " " + strconv.FormatUint(id, 10) + " " + side
}

// ParseChunkMarker parses a marker's content; ok is false for a marker of another tag or an
// unknown form.
func ParseChunkMarker(tag, content string) (id uint64, high bool, ok bool) {
	rest, found := strings.CutPrefix(content, tag+" ")
	if !found {
		return 0, false, false
	}
	num, side, found := strings.Cut(rest, " ")
	if !found || (side != "low" && side != "high") {
		return 0, false, false
	}
	id, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, false, false
	}
	return id, side == "high", true
}
