package change

import (
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
