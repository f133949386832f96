package codec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark/cdc/internal/slab"
	"github.com/tidemark/cdc/pkg/change"
)

// Header keys written on every record.
const (
	HeaderLSN    = "tidemark.lsn"     // commit LSN, "X/Y"
	HeaderOp     = "tidemark.op"      // c, u, d, r or t (a tombstone carries d)
	HeaderOldKey = "tidemark.old_key" // key-changing update: the old key JSON
	HeaderNewKey = "tidemark.new_key" // key-changing update: the new key JSON
	// HeaderUnchanged names, as a JSON array of column names, the columns of an update's after
	// image whose values PostgreSQL did not send (unchanged TOAST without a full before-image).
	HeaderUnchanged = "tidemark.unchanged"
	// HeaderArrayDims (json-with-schema only) gives the shape of array values that are not one
	// dimension starting at index 1, which the payload writes flattened:
	// {"after":{"col":"[0:2]"},"before":{...}}.
	HeaderArrayDims = "tidemark.array_dims"
)

// Unchanged is what an encoder writes for a column whose value PostgreSQL did not send
// (CDC_UNCHANGED_TOAST). The zero value is UnchangedOmit.
type Unchanged string

// Unchanged TOAST policies.
const (
	// UnchangedOmit leaves the column out of after; the HeaderUnchanged header names it, so a
	// consumer merges the update into the row it has. The default, also for "".
	UnchangedOmit Unchanged = "omit"
	// UnchangedPlaceholder writes Config.Placeholder as the column's value (a JSON string), as
	// Debezium does, and names the column in HeaderUnchanged too.
	UnchangedPlaceholder Unchanged = "placeholder"
)

// DefaultPlaceholder is Debezium's unavailable.value.placeholder.
const DefaultPlaceholder = "__debezium_unavailable_value"

// Version is source.version in every envelope.
const Version = "tidemark-1"

// Config for encoders. The zero value is usable (empty prefix and database, no tombstones,
// wall clock).
type Config struct {
	Database    string // source.db
	TopicPrefix string // topic = change.TopicName(TopicPrefix, export); source.name = TopicPrefix
	// Tombstones makes a delete (of a table with a key) be followed by a tombstone: the same key
	// with a nil value. True in production, where topics are compacted.
	Tombstones bool
	// Now gives the envelope's ts_ms; nil means time.Now.
	Now func() time.Time
	// MaxRecordBytes, when positive, refuses a change whose record value would be larger
	// (ErrRecordTooLarge): Kafka would refuse it anyway, and the export must fail alone.
	MaxRecordBytes int
	// Unchanged says what to write for an unchanged TOASTed column of an update whose old value
	// is unknown (no REPLICA IDENTITY FULL): UnchangedOmit (also for "") or
	// UnchangedPlaceholder; Placeholder is the string UnchangedPlaceholder writes
	// (DefaultPlaceholder when empty).
	Unchanged   Unchanged
	Placeholder string
	// Format is FormatJSON (also when empty) or FormatJSONWithSchema.
	Format Format
	// Types describes the types FormatJSONWithSchema cannot know statically; the same catalog
	// must serve every stage. Call Types.ResolveTable before NewEncoder (Prepare does).
	Types *Types
}

// WithSchema reports whether the format is json-with-schema.
func (c Config) WithSchema() bool { return c.Format == FormatJSONWithSchema }

// Prepare reads what NewEncoder needs from the database for t: in json-with-schema, the types of
// its columns that are not built in. It does nothing in the default format.
func (c Config) Prepare(ctx context.Context, t *change.Table) error {
	if !c.WithSchema() || c.Types == nil || t == nil {
		return nil
	}
	return c.Types.ResolveTable(ctx, t)
}

// Source is the per-change metadata.
type Source struct {
	LSN      change.LSN // commit LSN of the transaction (snapshot rows: consistent point - 1)
	Xid      uint32
	Seq      int64     // sequence of the change inside its transaction (snapshot: row number)
	Time     time.Time // commit time (snapshot: snapshot start); zero renders 0
	Snapshot bool
	Attempt  int // snapshot attempt (written only when Snapshot)
}

// ErrRowShape is wrapped when a row does not have one value per column.
var ErrRowShape = errors.New("row does not match table columns")

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

// ErrRecordTooLarge is wrapped when a change's record would exceed Config.MaxRecordBytes.
var ErrRecordTooLarge = errors.New("record too large")

// column is the precomputed encoding state of one column.
type column struct {
	name []byte // `"name":`, JSON-escaped
	oid  uint32
	kind kind
	node *node // json-with-schema
}

// Encoder turns the changes of one export schema version into Kafka records. It is not safe for
// concurrent use; Clone gives each worker its own.
//
// Record byte slices (Key, Value, header values) are carved from chunks the encoder allocates and
// never writes again once handed out: they are the caller's, read-only, and stay valid for as long
// as the caller keeps them. A chunk is freed when no record refers to it any more.
type Encoder struct {
	cfg     Config
	table   *change.Table
	topic   string
	cols    []column
	keyIdx  []int
	srcHead []byte // `"source":{..."table":"t","lsn":`
	// placeholder is Config.Placeholder as a JSON string (UnchangedPlaceholder).
	placeholder []byte
	now         func() time.Time
	// json-with-schema: `{"schema":<schema>,"payload":` of values and keys.
	valHead []byte
	keyHead []byte
	// truncKey is the key of a truncate record of a table with a key (nil without one): a
	// compacted topic refuses null keys, and no row's key has no columns.
	truncKey []byte

	// Reusable buffers.
	val     []byte    // envelope under construction
	key     []byte    // key under construction
	oldKey  []byte    // old key (updates)
	spans   []int     // value offsets in val of the current row, 2 per column
	scratch []byte    // array element unescaping
	merged  [][]byte  // after with unchanged columns resolved
	unavail []bool    // columns of merged that stay unknown
	arena   slab.Slab // keys, values and headers of the records handed out (arena.go)
	lastVal int       // bytes of the last value simple wrote
	hdrs    []change.Header
	conv    converter // json-with-schema value conversion
	dims    []byte    // json-with-schema: HeaderArrayDims of the record being encoded, or empty
	dimsSec bool      // dims has an open section
	section string    // `"before"` or `"after"` while a row of the envelope is encoded
}

// NewEncoder prepares an encoder for t. It returns an error for a nil table, a table with no
// columns, or column names that are empty or repeated.
func NewEncoder(cfg Config, t *change.Table) (*Encoder, error) {
	if t == nil {
		return nil, errors.New("new encoder: nil table")
	}
	if len(t.Columns) == 0 {
		return nil, fmt.Errorf("new encoder for %s: table has no columns", t.Export)
	}
	seen := make(map[string]bool, len(t.Columns))
	cols := make([]column, len(t.Columns))
	for i, c := range t.Columns {
		if c.Name == "" {
			return nil, fmt.Errorf("new encoder for %s: column %d has no name", t.Export, i+1)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("new encoder for %s: column %q appears twice", t.Export, c.Name)
		}
		seen[c.Name] = true
		name := appendString(nil, []byte(c.Name))
		cols[i] = column{name: append(name, ':'), oid: c.TypeOID, kind: kindOf(c.TypeOID)}
		if cfg.WithSchema() {
			n, err := buildNode(cfg.Types, c.TypeOID, c.TypeMod, 0)
			if err != nil {
				return nil, fmt.Errorf("new encoder for %s: column %q: %w", t.Export, c.Name, err)
			}
			cols[i].node = n
		}
	}
	var h []byte
	h = append(h, `"source":{"version":"`+Version+`","connector":"tidemark","name":`...)
	h = appendString(h, []byte(cfg.TopicPrefix))
	h = append(h, `,"db":`...)
	h = appendString(h, []byte(cfg.Database))
	h = append(h, `,"schema":`...)
	h = appendString(h, []byte(t.Export.Schema))
	h = append(h, `,"table":`...)
	h = appendString(h, []byte(t.Export.Table))
	h = append(h, `,"lsn":`...)
	e := &Encoder{
		cfg:     cfg,
		table:   t,
		topic:   change.TopicName(cfg.TopicPrefix, t.Export),
		cols:    cols,
		keyIdx:  t.KeyColumns(),
		srcHead: h,
		now:     cfg.Now,
		arena:   slab.New(arenaChunk, arenaLarge),
	}
	ph := cfg.Placeholder
	if ph == "" {
		ph = DefaultPlaceholder
	}
	e.placeholder = appendString(nil, []byte(ph))
	if e.now == nil {
		e.now = time.Now
	}
	if cfg.WithSchema() {
		e.valHead, e.keyHead = connectHeads(e.topic, t, cols)
	}
	if len(e.keyIdx) > 0 {
		e.truncKey = []byte("{}")
		if cfg.WithSchema() {
			k := append([]byte(`{"schema":{"type":"struct","fields":[],"optional":false,"name":`), appendString(nil, []byte(e.topic+".TruncateKey"))...)
			e.truncKey = append(k, `},"payload":{}}`...)
		}
	}
	return e, nil
}

// Clone returns an encoder sharing e's immutable state with buffers of its own.
func (e *Encoder) Clone() *Encoder {
	return &Encoder{
		cfg: e.cfg, table: e.table, topic: e.topic, cols: e.cols,
		keyIdx: e.keyIdx, srcHead: e.srcHead, now: e.now, placeholder: e.placeholder,
		valHead: e.valHead, keyHead: e.keyHead, truncKey: e.truncKey,
		arena: slab.New(arenaChunk, arenaLarge),
	}
}

// Topic is the Kafka topic of the encoder's export.
func (e *Encoder) Topic() string { return e.topic }

// Table is the schema the encoder was built for.
func (e *Encoder) Table() *change.Table { return e.table }

// Read appends the record of one snapshot row (op r).
func (e *Encoder) Read(dst []change.Record, src Source, row [][]byte) ([]change.Record, error) {
	return e.simple(dst, src, change.OpRead, nil, row, nil)
}

// Insert appends the record of an insert (op c).
func (e *Encoder) Insert(dst []change.Record, src Source, after [][]byte) ([]change.Record, error) {
	return e.simple(dst, src, change.OpCreate, nil, after, nil)
}

// Update appends the records of an update. before is the old tuple when PostgreSQL sent one (key
// columns only, others nil, or the full row under REPLICA IDENTITY FULL), else nil. unchanged
// marks the columns of after that were not sent (unchanged TOAST); such a column takes its value
// from before when before has it. Otherwise it is left out of after (UnchangedOmit) or written as
// the placeholder (UnchangedPlaceholder), and the record's HeaderUnchanged names it. A key column
// that stays unknown is an error: the record could not be keyed.
//
// When before's key differs from after's, the update is published as Debezium does: a delete of
// the old key (followed by its tombstone when tombstones are on) and a create of the new one, all
// carrying the headers HeaderOldKey and HeaderNewKey. Otherwise it is one record with op u.
func (e *Encoder) Update(dst []change.Record, src Source, before, after [][]byte, unchanged []bool) ([]change.Record, error) {
	if err := e.checkRow("update new tuple", after); err != nil {
		return dst, err
	}
	if before != nil {
		if err := e.checkRow("update old tuple", before); err != nil {
			return dst, err
		}
	}
	if unchanged != nil && len(unchanged) != len(e.cols) {
		return dst, fmt.Errorf("encode update of %s: %w: %d unchanged flags for %d columns", e.table.Export, ErrRowShape, len(unchanged), len(e.cols))
	}
	resolved, unavail := e.resolve(before, after, unchanged)
	if before == nil || len(e.keyIdx) == 0 {
		return e.simple(dst, src, change.OpUpdate, before, resolved, unavail)
	}
	var err error
	if e.oldKey, err = e.appendKey(e.oldKey[:0], before, nil); err != nil {
		return dst, err
	}
	if e.key, err = e.appendKey(e.key[:0], resolved, unavail); err != nil {
		return dst, err
	}
	if bytes.Equal(e.oldKey, e.key) {
		return e.simple(dst, src, change.OpUpdate, before, resolved, unavail)
	}
	oldKey, newKey := e.own(e.oldKey), e.own(e.key)
	lsn := e.lsnText(src.LSN)
	unch := e.unchangedNames(unavail)
	n := len(dst)
	if e.val, err = e.appendEnvelope(e.val[:0], src, change.OpDelete, before, nil, nil); err != nil {
		return dst, err
	}
	dst = e.appendDelete(dst, oldKey, e.own(e.val), lsn, oldKey, newKey)
	if e.val, err = e.appendEnvelope(e.val[:0], src, change.OpCreate, nil, resolved, unavail); err != nil {
		return dst[:n], err
	}
	return append(dst, change.Record{
		Topic: e.topic, Partition: change.AnyPartition, Key: newKey, Value: e.own(e.val),
		Headers: e.headers(lsn, change.OpCreate, oldKey, newKey, unch),
	}), nil
}

// Delete appends the record of a delete (op d) whose old tuple is before (key columns only, the
// others nil, unless the table has REPLICA IDENTITY FULL), followed by a tombstone when
// tombstones are on and the table has a key.
func (e *Encoder) Delete(dst []change.Record, src Source, before [][]byte) ([]change.Record, error) {
	if before == nil {
		return dst, fmt.Errorf("encode delete of %s: no old tuple", e.table.Export)
	}
	n := len(dst)
	dst, err := e.simple(dst, src, change.OpDelete, before, nil, nil)
	if err != nil || !e.cfg.Tombstones || len(e.keyIdx) == 0 {
		return dst, err
	}
	r := dst[n]
	return append(dst, change.Record{
		Topic: e.topic, Partition: change.AnyPartition, Key: r.Key,
		Headers: e.headers(r.Headers[0].Value, change.OpDelete, nil, nil, nil),
	}), nil
}

// Truncate appends the one record of a truncate (op t): before and after null, and Partition
// change.AllPartitions so the sink writes it to every partition. Its key is null for a keyless
// table and, for a table with a key (whose topic is compacted, and refuses null keys), a key
// with no columns: {} (json-with-schema: a struct <topic>.TruncateKey with no fields).
func (e *Encoder) Truncate(dst []change.Record, src Source) ([]change.Record, error) {
	var err error
	if e.val, err = e.appendEnvelope(e.val[:0], src, change.OpTruncate, nil, nil, nil); err != nil {
		return dst, err
	}
	return append(dst, change.Record{
		Topic: e.topic, Partition: change.AllPartitions, Key: e.truncKey, Value: e.own(e.val),
		Headers: e.headers(e.lsnText(src.LSN), change.OpTruncate, nil, nil, nil),
	}), nil
}

// simple appends one record with the given op; the key comes from after, or from before when
// after is nil. unavail marks the columns of after whose values are unknown (see Update).
func (e *Encoder) simple(dst []change.Record, src Source, op change.Op, before, after [][]byte, unavail []bool) ([]change.Record, error) {
	if before != nil {
		if err := e.checkRow("old tuple", before); err != nil {
			return dst, err
		}
	}
	if after != nil {
		if err := e.checkRow("new tuple", after); err != nil {
			return dst, err
		}
	} else if before == nil {
		return dst, fmt.Errorf("encode %c of %s: no tuple", op, e.table.Export)
	}
	// The value is written straight into the arena (see arenaTail), unless the last one was
	// too large to share a chunk.
	var val []byte
	var err error
	if e.lastVal <= arenaLarge/2 {
		if val, err = e.appendEnvelope(e.arenaTail(), src, op, before, after, unavail); err != nil {
			return dst, err
		}
		val = e.commitTail(val)
	} else {
		if e.val, err = e.appendEnvelope(e.val[:0], src, op, before, after, unavail); err != nil {
			return dst, err
		}
		val = e.own(e.val)
	}
	e.lastVal = len(val)
	// e.spans now holds the value offsets of the last row encoded: after, or before when
	// after is nil. The key reuses those bytes.
	var key []byte
	if len(e.keyIdx) > 0 {
		e.key = append(e.key[:0], e.keyHead...)
		e.key = append(e.key, '{')
		for i, c := range e.keyIdx {
			if unavail != nil && unavail[c] {
				return dst, e.unknownKey(c)
			}
			if i > 0 {
				e.key = append(e.key, ',')
			}
			e.key = append(e.key, e.cols[c].name...)
			e.key = append(e.key, val[e.spans[2*c]:e.spans[2*c+1]]...)
		}
		e.key = append(e.key, '}')
		if e.keyHead != nil {
			e.key = append(e.key, '}')
		}
		key = e.own(e.key)
	}
	return append(dst, change.Record{
		Topic: e.topic, Partition: change.AnyPartition, Key: key, Value: val,
		Headers: e.headers(e.lsnText(src.LSN), op, nil, nil, e.unchangedNames(unavail)),
	}), nil
}

// unknownKey is the error for a key column whose value PostgreSQL did not send.
func (e *Encoder) unknownKey(c int) error {
	return fmt.Errorf("encode update of %s: key column %q is an unchanged out-of-line value that PostgreSQL did not send, so the record has no key; set REPLICA IDENTITY FULL on the table",
		e.table.Export, e.table.Columns[c].Name)
}

// unchangedNames returns the HeaderUnchanged value for unavail (nil when no column is unknown):
// a JSON array of the column names, in the arena.
func (e *Encoder) unchangedNames(unavail []bool) []byte {
	if unavail == nil {
		return nil
	}
	b := append(e.scratch[:0], '[')
	for i, u := range unavail {
		if !u {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, e.cols[i].name[:len(e.cols[i].name)-1]...) // the quoted name without ':'
	}
	b = append(b, ']')
	e.scratch = b
	return e.own(b)
}

func (e *Encoder) checkRow(what string, row [][]byte) error {
	if len(row) != len(e.cols) {
		return fmt.Errorf("encode %s of %s: %w: %d values for %d columns", what, e.table.Export, ErrRowShape, len(row), len(e.cols))
	}
	return nil
}

// resolve returns after with its unchanged columns filled in from before, and the columns that
// stay unknown (nil when none).
func (e *Encoder) resolve(before, after [][]byte, unchanged []bool) ([][]byte, []bool) {
	if unchanged == nil {
		return after, nil
	}
	e.merged = append(e.merged[:0], after...)
	e.unavail = append(e.unavail[:0], unchanged...)
	missing := false
	for i, u := range unchanged {
		if !u {
			continue
		}
		if before != nil && before[i] != nil {
			e.merged[i] = before[i]
			e.unavail[i] = false
		} else {
			missing = true
		}
	}
	if !missing {
		return e.merged, nil
	}
	return e.merged, e.unavail
}
