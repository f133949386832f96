package change

import "time"

// Op is the Debezium operation code of a change.
type Op byte

// Operation codes, as Debezium writes them.
const (
	OpRead     Op = 'r' // a snapshot row
	OpCreate   Op = 'c'
	OpUpdate   Op = 'u'
	OpDelete   Op = 'd'
	OpTruncate Op = 't'
)

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// AnyPartition lets the producer's partitioner choose (hash of the key).
const AnyPartition int32 = -1

// AllPartitions asks the sink to write one copy of the record to every partition of its topic
// (used for truncate records).
const AllPartitions int32 = -2

// Record is one Kafka record, encoded and ready to produce.
type Record struct {
	Topic     string
	Partition int32 // AnyPartition, AllPartitions, or an explicit partition
	Key       []byte
	Value     []byte // nil is a tombstone
	Headers   []Header
}

// Size is an estimate of the bytes the record takes in memory and on the wire.
func (r *Record) Size() int {
	n := len(r.Topic) + len(r.Key) + len(r.Value) + 32
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Kind says what a Unit carries.
type Kind uint8

// Unit kinds.
const (
	// KindTxn is one committed PostgreSQL transaction: the records of every hydrated export it
	// touched. End is its TransactionEndLSN; the stream position reaches End once it is durable.
	KindTxn Kind = iota + 1
	// KindProgress moves the stream position to End with nothing to publish (a keepalive while
	// nothing is open, or a transaction that touched no hydrated export).
	KindProgress
	// KindHeld is one transaction of a hydrating export, released from its hold buffer after its
	// copy. It does not move the stream position (its End is older than it).
	KindHeld
	// KindSnapshot is a batch of snapshot rows of Export, attempt Attempt.
	KindSnapshot
	// KindSnapshotDone follows the last snapshot batch of Export's attempt: once it is durable,
	// so is the whole copy.
	KindSnapshotDone
	// KindHydrated follows the last held transaction of Export: once durable, Export is hydrated
	// and its own position is the stream position End.
	KindHydrated
	// KindRemoved says Export left the publication and the stream has passed End, the WAL
	// position at which that was noticed.
	KindRemoved
	// KindFailed says Export stopped on a permanent error (Err).
	KindFailed
	// KindChunk is one chunk of Export's chunked copy (Chunk), published by the replication
	// stage at the stream position where its high marker arrived. It does not move the stream
	// position.
	KindChunk
)

var kindNames = [...]string{"", "txn", "progress", "held", "snapshot", "snapshot-done", "hydrated", "removed", "failed", "chunk"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Unit is what a stage hands to the sink: records plus the positions they establish.
type Unit struct {
	Kind    Kind
	Export  ExportID // snapshot, held, hydrated, removed and failed units
	Attempt int      // snapshot attempt, for snapshot units
	Commit  LSN      // commit LSN of the transaction (KindTxn, KindHeld)
	End     LSN      // stream position established by the unit (see Kind)
	Xid     uint32
	Time    time.Time // commit time
	Rows    int       // snapshot rows in this unit
	Records []Record
	Err     string // KindFailed
	Chunk   *Chunk // KindChunk
	// Claim, when set, is the unit's share of its stage's Budget (a chunk's memory slot, a
	// transaction's bytes in flight): the sink returns it once the unit is durable, a stage
	// that drops the unit returns it then.
	Claim *Claim
	// Piece, on a KindTxn unit, makes it one piece of a transaction too large to hand over
	// whole (see Piece); nil for a whole transaction.
	Piece *Piece
	// Cause, on a KindFailed unit, is the error whose text Err is, for errors.Is and errors.As:
	// the text can quote row values, the class of the error cannot.
	Cause error
}

// Piece says which part of a large transaction a KindTxn unit carries. The replication stage
// hands a transaction over in pieces once its records pass a byte bound, in order, all with
// the transaction's Commit. Only the last piece has End set: the stream position passes the
// transaction only with it, so no watermark and no checkpoint position passes the transaction
// before its last piece is durable.
type Piece struct {
	// Index numbers the pieces of one transaction from 0 (again from 0 when the server sends
	// the transaction again, after a reconnect or a restart). The sink starts a Kafka
	// transaction at piece 0.
	Index int
	// Last is set on the piece that completes the transaction.
	Last bool
	// Changes is the number of change messages (insert, update, delete, truncate) of the
	// transaction, in stream order, that this piece and the earlier ones cover. A restart that
	// finds the transaction partly durable skips that many changes when the server sends it
	// again.
	Changes int64
}

// Partial names the durable part of a transaction published in pieces: the first Changes
// change messages of the transaction committing at Commit.
type Partial struct {
	Commit  LSN   `json:"commit"`
	Changes int64 `json:"changes"`
}

// Bytes estimates the memory held by the unit's records.
func (u *Unit) Bytes() int {
	n := 64
	for i := range u.Records {
		n += u.Records[i].Size()
	}
	return n
}
