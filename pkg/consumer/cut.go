package consumer

import (
	"encoding/json"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/watermark"
)

// Cut is one consistent cut: every change of the joined tables with commit LSN in [Prev, LSN),
// grouped into source transactions, and the lifecycle events that happened since the previous
// cut. Apply EventJoined and EventReset first (empty the table), then Txns in order, then store
// Position with the effects. EventRemoved and EventFailed say that the cut holds the table's
// last changes: it gets no more.
//
// Reader.Next returns whole cuts. Reader.Read returns parts: a cut in one or more parts (Part
// 0, 1, ...; the last one Final, with Position), or a part of a table's load (Load set), which
// belongs to no cut. See the package documentation.
type Cut struct {
	// LSN is the cut's watermark: every change with a lower commit LSN of every joined table
	// is in this cut or an earlier one; none with a commit LSN >= LSN is.
	LSN change.LSN
	// Prev is the previous cut's LSN (the resumed position's LSN for the first cut).
	Prev change.LSN
	// Events are the lifecycle events, in the order the watermark topic said them.
	Events []Event
	// Txns are the source transactions, in commit order (CommitLSN, then TxID; a copy's rows
	// before a transaction at the same LSN).
	Txns []Txn
	// Tables are the joined tables after this cut (those whose changes the cut may hold).
	Tables []change.ExportID
	// Position is where a reader resumes to deliver the cut after this one (on the Final part).
	Position Position
	// Part numbers the parts of one cut, or of one load, from 0; Final is set on the last.
	// Events come with part 0. A whole cut (Reader.Next) is part 0 and Final.
	Part  int
	Final bool
	// Load, when set, makes this a part of a table's load, not of a cut: Txns hold changes of
	// Load.Export alone, its copy's rows and its changes below its hydration watermark (LSN),
	// in an order that keeps each key's order (a chunked copy's rows may come after changes of
	// other keys at higher LSNs, and the last chunk's rows may lie at or above LSN). Apply
	// them to a shadow of the table (part 0: start it empty), outside any cut; the table joins
	// in a later cut, whose EventJoined makes the shadow the table. Position is not set.
	Load *Load
}

// Load describes a part of a table's load.
type Load struct {
	Export  change.ExportID
	Attempt int
	// Done is set on the load's last part: the table joins in a coming cut.
	Done bool
	// Record is the watermark record that said hydrated.
	Record watermark.Record
}

// Changes returns the number of changes in the cut.
func (c *Cut) Changes() int {
	n := 0
	for i := range c.Txns {
		n += len(c.Txns[i].Changes)
	}
	return n
}

// Txn is one source transaction's changes of the chosen tables in one cut. A table that joins
// brings its changes below the previous cut too: the part of a transaction that touched it can
// come in a later cut than the part that touched tables joined before.
type Txn struct {
	CommitLSN change.LSN
	TxID      uint32
	// Snapshot is set for rows of a copy (op r): they share the LSN (consistent point - 1, or a
	// chunk's position) and are not a source transaction.
	Snapshot bool
	// Changes in source.sequence order (ties: export, partition, offset).
	Changes []Change
}

// Change is one row change as cdc published it.
type Change struct {
	Export    change.ExportID
	Topic     string
	Partition int32
	Offset    int64
	// Op is c, u, d, r or t (tombstones are not delivered: they follow their delete).
	Op change.Op
	// Key is the record key (the key columns as a JSON object; {} for a truncate, nil for a
	// keyless table). In json-with-schema it is the key's payload, without the schema.
	Key json.RawMessage
	// Before and After are the envelope's before and after images (nil when null). In
	// json-with-schema they are the payload's, without the schema.
	Before, After json.RawMessage
	Source        Source
	// Unchanged names the columns left out of After because PostgreSQL did not send them
	// (unchanged TOAST): merge After into the row you have (tidemark.unchanged header).
	Unchanged []string
	// OldKey and NewKey are set on the delete and the create of an update that changed the key
	// (tidemark.old_key, tidemark.new_key headers), as the key columns' JSON object, like Key
	// (in json-with-schema, the payload without the schema). The delete comes first.
	OldKey, NewKey json.RawMessage
	// Schema is json-with-schema's Connect schema of the value, avro's 4-byte schema id (nil for
	// json), a slice of the record like After: what a consumer that creates or checks tables
	// reads the columns' types from (format.Decoder's Schema), without fetching the record again.
	Schema json.RawMessage
	// Decoder is the decoder of the record's format: it parses Schema and reads the values of
	// Key, Before and After as PostgreSQL text (format.Decoder's Schema and AppendText).
	Decoder format.Decoder
}

// Source is the envelope's source block, the part a consumer orders and groups by.
type Source struct {
	LSN      change.LSN `json:"lsn"`
	TxID     uint32     `json:"txId"`
	Sequence int64      `json:"sequence"`
	Snapshot bool       `json:"-"`
	Attempt  int        `json:"attempt"`
	DB       string     `json:"db"`
	Schema   string     `json:"schema"`
	Table    string     `json:"table"`
	TsMs     int64      `json:"ts_ms"`
}

// EventKind says what happened to a table.
type EventKind int

// Event kinds.
const (
	// EventJoined: the table is hydrated and joins the cuts. With Reader.Next this cut carries
	// its copy (op r) and its changes since: start the table from empty. With Reader.Read its
	// load came before, in load parts: make the loaded shadow the table, then apply the cut.
	EventJoined EventKind = iota + 1
	// EventReset: a new copy attempt of a joined table began; it leaves the cuts until it
	// joins again with the new copy, and no cut passes this one until then (the other tables
	// wait for it). Its rows so far are stale; keep them until the new copy joins.
	EventReset
	// EventRemoved: the table left the publication; every change of it up to its final
	// watermark has been delivered. (For a table that had not joined yet, its load, if one
	// began, will not end: discard it.)
	EventRemoved
	// EventFailed: cdc stopped the table on a permanent error (Event.Error); every change of it
	// up to its last watermark has been delivered. The others go on.
	EventFailed
)

var eventNames = [...]string{"", "joined", "reset", "removed", "failed"}

func (k EventKind) String() string {
	if k > 0 && int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// Event is a lifecycle event of one table.
type Event struct {
	Kind   EventKind
	Export change.ExportID
	// Attempt is the table's copy attempt (the new one for EventJoined and EventReset).
	Attempt int
	// Error is why a failed table stopped.
	Error string
	// Record is the watermark record that said it.
	Record watermark.Record
}
