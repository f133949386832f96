package format

import (
	"context"
	"errors"
	"fmt"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// Format is one record format: how a table's changes become the bytes of a record's key and
// value, and how those bytes are read back. A format is stateless; its encoders are per table.
type Format interface {
	// Name is the format's CDC_VALUE_FORMAT value ("json", "json-with-schema").
	Name() string
	// Prepare reads what NewEncoder needs from the database for t (the types the format cannot
	// know statically) into cfg.Types. It does nothing when the format needs nothing.
	Prepare(ctx context.Context, cfg Config, t *change.Table) error
	// NewEncoder returns the encoder of t's records. t has at least one column, and its
	// column names are unique and not empty.
	NewEncoder(cfg Config, t *change.Table) (TableEncoder, error)
	// Decoder returns the format's decoder, which reads what its encoders write.
	Decoder() Decoder
}

// Decoder reads the records of one format. It keeps no state: one serves every goroutine.
type Decoder interface {
	// Recognizes reports, cheaply and without reading the whole value, whether value looks like
	// a record value of this format (a consumer may read topics written in any format).
	Recognizes(value []byte) bool
	// Decode reads a record's value and key into r. The slices of r refer to value and key (no
	// copy). A value that is not a change envelope of the format is an error wrapping
	// ErrEnvelope.
	Decode(r *Record, key, value []byte) error
	// Key returns the key columns of a key this format wrote as a JSON object (json-with-schema:
	// the key's payload), nil for nil; a slice of key when the format writes JSON.
	Key(key []byte) []byte
	// Schema parses a Record's Schema: the record's own description of its row's columns. It
	// returns nil and no error when b is empty (the format's records carry none: json).
	Schema(b []byte) (Schema, error)
	// AppendText appends the PostgreSQL text of raw, one column's value in a Record's Key,
	// Before or After, read as a value of col: for columns the record's Schema does not
	// describe. ok is false for SQL NULL (nothing appended).
	AppendText(dst, raw []byte, col *Column) (_ []byte, ok bool, err error)
	// AppendJSON appends a record's key or value as JSON for people to read (tidemark-tail):
	// the bytes themselves in the JSON formats; b when the format cannot read it.
	AppendJSON(dst, b []byte) []byte
}

// Schema is a record's description of its row's columns, as the format writes it.
type Schema interface {
	// Field returns the column called name, or nil when the schema has none.
	Field(name string) Field
	// Fields returns the columns in the row's order.
	Fields() []Field
}

// Field is one column of a Schema.
type Field interface {
	// Name is the column's name.
	Name() string
	// PGType is the PostgreSQL type a column created for the field gets.
	PGType() (string, error)
	// AppendText appends the PostgreSQL text of raw, the field's value in a Record's Key,
	// Before or After; ok is false for SQL NULL (nothing appended).
	AppendText(dst, raw []byte) (_ []byte, ok bool, err error)
}

// Column is what a decoder needs to know of the PostgreSQL column a value without a Schema is
// read into: plain JSON carries no types, so the target's type decides.
type Column struct {
	IsBytea bool    // bytea (or a domain over it)
	IsJSON  bool    // json or jsonb
	Elem    *Column // the element type of an array column, nil for others
}

// ErrSchemaRefused is wrapped when the schema registry refuses a table's new schema under its
// compatibility rules: permanent for that table's export until the schema or the rules change,
// and for that export alone.
var ErrSchemaRefused = errors.New("the schema registry refused the table's schema")

// ErrBeyondPostgres is wrapped when a value read back is beyond what PostgreSQL can hold (a
// decimal past numeric's digits, an array of more dimensions than PostgreSQL's limit, a
// timestamp past int64 microseconds): no retry can apply it.
var ErrBeyondPostgres = errors.New("beyond PostgreSQL's limits")

// Record is a change record read back: the envelope of a change, with the row images and the
// key as JSON objects whose values are written as the format writes them.
type Record struct {
	Op change.Op
	// Before and After are the envelope's images (nil when null).
	Before, After []byte
	// Key is the key columns as a JSON object ({} for a truncate, nil for a keyless table).
	Key []byte
	// Schema is the format's description of the value's types (json-with-schema: the Connect
	// schema), nil when the format has none in the record.
	Schema []byte
	Source RecordSource
}

// RecordSource is the envelope's source block as a consumer orders and groups by it.
type RecordSource struct {
	LSN      change.LSN
	TxID     uint32
	Sequence int64
	TsMs     int64
	Attempt  int
	Snapshot bool // source.snapshot, or op r
	DB       string
	Schema   string
	Table    string
}

// ErrEnvelope is wrapped by the error of a record that is not a change envelope of its format.
var ErrEnvelope = errors.New("not a tidemark change envelope")

// TableEncoder writes the key and value of one table's records. The envelope layer (pkg/codec)
// decides which records a change becomes, with which op, key and headers; a TableEncoder only
// writes their bytes, with one call per record. It is not safe for concurrent use: Clone gives
// each worker its own.
type TableEncoder interface {
	// Encode appends the value of ch's record to dst, then its key when the table has key
	// columns (for a truncate, the key that stands for every row), then the value of the
	// format's own header when the record has one; Encoded says how long each part is. The
	// bytes of dst before it are left as they were.
	Encode(dst []byte, ch *Change) (Encoded, error)
	// AppendKey appends the key of row (one text per column, key columns not nil) to dst: the
	// bytes Encode writes as the key of a record whose row it is.
	AppendKey(dst []byte, row [][]byte) ([]byte, error)
	// Clone returns an encoder of the same table with buffers of its own.
	Clone() TableEncoder
}

// Change is one record to encode: the envelope of Op with the Before and After images (each
// value PostgreSQL's text rendering, nil for SQL NULL; a nil image is null).
type Change struct {
	Op     change.Op
	Source Source
	// TsMs is the envelope's ts_ms: when the change was encoded, in Unix milliseconds.
	TsMs          int64
	Before, After [][]byte
	// Unavail marks the columns of After whose values are unknown (unchanged TOAST that the old
	// tuple does not carry); nil when none is. The format writes them as Config.Unchanged says.
	Unavail []bool
	// Key, when set, is a key this format wrote, read back from the topic: the record is a
	// delete (Before and After are nil) whose before image holds the key's columns only, and
	// whose key is Key itself.
	Key []byte
}

// Encoded says what Encode appended: Value bytes of value, then Key bytes of key (0 for a
// table without key columns), then HeaderLen bytes of the value of the header HeaderKey
// (HeaderLen 0: no header of the format's own).
type Encoded struct {
	Buf       []byte // dst with the record appended
	Value     int
	Key       int
	HeaderKey string
	HeaderLen int
}

// Source is the per-change metadata.
type Source struct {
	LSN change.LSN // commit LSN of the transaction (snapshot rows: consistent point - 1)
	Xid uint32
	Seq int64 // sequence of the change inside its transaction (snapshot: row number)
	// TsMs is the commit time (snapshot: snapshot start) in Unix milliseconds; 0 when unknown.
	TsMs     int64
	Snapshot bool
	Attempt  int // snapshot attempt (written only when Snapshot)
}

// Config is what every format's encoders are built from.
type Config struct {
	Database    string // source.db
	TopicPrefix string // source.name, and the topic's prefix (change.TopicName)
	// Unchanged says how to write an unknown column of After (Change.Unavail); Placeholder is
	// the string UnchangedPlaceholder writes, never empty.
	Unchanged   Unchanged
	Placeholder string
	// Types describes the types the format cannot know statically; the same catalog must serve
	// every stage, so that the snapshot and the stream build identical encoders.
	Types *Types
	// Registry is the schema registry that formats with registered schemas (avro) register
	// them in; nil when none is configured (the JSON formats need none).
	Registry *schemareg.Client
}

// Unchanged is what an encoder writes for a column whose value PostgreSQL did not send
// (CDC_UNCHANGED_TOAST). The zero value is UnchangedOmit.
type Unchanged string

// Unchanged TOAST policies.
const (
	// UnchangedOmit leaves the column out of after; a header names it, so a consumer merges
	// the update into the row it has. The default, also for "".
	UnchangedOmit Unchanged = "omit"
	// UnchangedPlaceholder writes Config.Placeholder as the column's value, as Debezium does
	// (where the format can: json-with-schema writes it only into string columns).
	UnchangedPlaceholder Unchanged = "placeholder"
)

// ErrNotRepresentable is wrapped when a value has no faithful encoding in the format (in
// json-with-schema: a float NaN or infinity, a numeric NaN, a timestamp beyond the int64
// microsecond range, ...). The export fails instead of carrying a wrong value.
var ErrNotRepresentable = errors.New("value cannot be represented in the value format")

// ValueError is a column value that cannot be encoded. Its text quotes the value, so it is row
// data: show it only where row data may be shown (a log, the admin HTTP endpoints), and use
// errors.As to tell the class of failure elsewhere.
type ValueError struct {
	Column string
	Export change.ExportID
	Err    error
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("encode column %q of %s: %v", e.Column, e.Export, e.Err)
}

func (e *ValueError) Unwrap() error { return e.Err }
