package codec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tidemark/cdc/internal/slab"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/formats"
	"github.com/tidemark/cdc/pkg/schemareg"
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
)

// A format may add a header of its own (json-with-schema: connectjson.HeaderArrayDims); the
// record's tombstone carries it too.

// Unchanged is what an encoder writes for a column whose value PostgreSQL did not send
// (CDC_UNCHANGED_TOAST). The zero value is UnchangedOmit.
type Unchanged = format.Unchanged

// Unchanged TOAST policies.
const (
	// UnchangedOmit leaves the column out of after; the HeaderUnchanged header names it, so a
	// consumer merges the update into the row it has. The default, also for "".
	UnchangedOmit = format.UnchangedOmit
	// UnchangedPlaceholder writes Config.Placeholder as the column's value (a JSON string), as
	// Debezium does, and names the column in HeaderUnchanged too.
	UnchangedPlaceholder = format.UnchangedPlaceholder
)

// DefaultPlaceholder is Debezium's unavailable.value.placeholder.
const DefaultPlaceholder = "__debezium_unavailable_value"

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
	// Format names the record format (pkg/format/formats): FormatJSON (also when empty),
	// FormatJSONWithSchema, or any other format listed there.
	Format Format
	// Types describes the types a format cannot know statically (json-with-schema); the same
	// catalog must serve every stage. Prepare fills it before NewEncoder.
	Types *Types
	// Registry is the schema registry of the formats that register their schemas (avro); nil
	// when none is configured.
	Registry *schemareg.Client
}

// Prepare reads what NewEncoder needs from the database for t: the types of its columns that
// the format cannot know statically (json-with-schema), nothing in json.
func (c Config) Prepare(ctx context.Context, t *change.Table) error {
	f, ok := formats.Lookup(string(c.Format))
	if !ok || t == nil {
		return nil // NewEncoder reports the unknown format
	}
	return f.Prepare(ctx, c.formatConfig(), t)
}

// formatConfig is what the format's encoders are built from.
func (c Config) formatConfig() format.Config {
	ph := c.Placeholder
	if ph == "" {
		ph = DefaultPlaceholder
	}
	return format.Config{Database: c.Database, TopicPrefix: c.TopicPrefix, Unchanged: c.Unchanged, Placeholder: ph, Types: c.Types, Registry: c.Registry}
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
type ValueError = format.ValueError

// ErrNotRepresentable is wrapped when a value has no faithful encoding in the format (a float
// NaN or infinity in json-with-schema, ...). The export fails instead of carrying a wrong value.
var ErrNotRepresentable = format.ErrNotRepresentable

// ErrSchemaRefused is wrapped by Prepare's error when the schema registry refuses a table's
// schema (avro): permanent for that export alone.
var ErrSchemaRefused = format.ErrSchemaRefused

// ErrRecordTooLarge is wrapped when a change's record would exceed Config.MaxRecordBytes.
var ErrRecordTooLarge = errors.New("record too large")

// Encoder turns the changes of one export schema version into Kafka records: the envelope layer.
// It decides which records a change becomes (a key change is a delete, its tombstone and a
// create; a delete is followed by its tombstone), resolves unchanged TOAST, and writes the
// headers; the format's per-table encoder writes each record's key and value, with one call per
// record. It is not safe for concurrent use; Clone gives each worker its own.
//
// Record byte slices (Key, Value, header values) are carved from chunks the encoder allocates and
// never writes again once handed out: they are the caller's, read-only, and stay valid for as long
// as the caller keeps them. A chunk is freed when no record refers to it any more.
type Encoder struct {
	cfg    Config
	table  *change.Table
	topic  string
	enc    format.TableEncoder
	keyIdx []int
	// names are the columns' names as JSON strings (HeaderUnchanged).
	names [][]byte
	now   func() time.Time

	// Reusable buffers.
	ch      format.Change // the record being encoded
	val     []byte        // a record too large for the arena's tail, under construction
	oldKey  []byte        // old key (updates)
	newKey  []byte        // new key (updates)
	scratch []byte
	merged  [][]byte        // after with unchanged columns resolved
	unavail []bool          // columns of merged that stay unknown
	arena   slab.Slab       // keys, values and headers of the records handed out (arena.go)
	lastLen int             // bytes of the last value encode kept
	lastHdr change.Header   // the format's header of the last record encode kept (Key "": none)
	hdrs    []change.Header // header slices handed out
}

// NewEncoder prepares an encoder for t. It returns an error for a nil table, a table with no
// columns, column names that are empty or repeated, or an unknown format.
func NewEncoder(cfg Config, t *change.Table) (*Encoder, error) {
	if t == nil {
		return nil, errors.New("new encoder: nil table")
	}
	if len(t.Columns) == 0 {
		return nil, fmt.Errorf("new encoder for %s: table has no columns", t.Export)
	}
	seen := make(map[string]bool, len(t.Columns))
	names := make([][]byte, len(t.Columns))
	for i, c := range t.Columns {
		if c.Name == "" {
			return nil, fmt.Errorf("new encoder for %s: column %d has no name", t.Export, i+1)
		}
		if seen[c.Name] {
			return nil, fmt.Errorf("new encoder for %s: column %q appears twice", t.Export, c.Name)
		}
		seen[c.Name] = true
		names[i] = format.AppendJSONString(nil, []byte(c.Name))
	}
	f, ok := formats.Lookup(string(cfg.Format))
	if !ok {
		return nil, fmt.Errorf("new encoder for %s: unknown value format %q (known: %s)", t.Export, cfg.Format, strings.Join(formats.Names(), ", "))
	}
	enc, err := f.NewEncoder(cfg.formatConfig(), t)
	if err != nil {
		return nil, err
	}
	e := &Encoder{
		cfg:    cfg,
		table:  t,
		topic:  change.TopicName(cfg.TopicPrefix, t.Export),
		enc:    enc,
		keyIdx: t.KeyColumns(),
		names:  names,
		now:    cfg.Now,
		arena:  slab.New(arenaChunk, arenaLarge),
	}
	if e.now == nil {
		e.now = time.Now
	}
	return e, nil
}

// Clone returns an encoder sharing e's immutable state with buffers of its own.
func (e *Encoder) Clone() *Encoder {
	return &Encoder{
		cfg: e.cfg, table: e.table, topic: e.topic, enc: e.enc.Clone(),
		keyIdx: e.keyIdx, names: e.names, now: e.now,
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
	if unchanged != nil && len(unchanged) != len(e.table.Columns) {
		return dst, fmt.Errorf("encode update of %s: %w: %d unchanged flags for %d columns", e.table.Export, ErrRowShape, len(unchanged), len(e.table.Columns))
	}
	resolved, unavail := e.resolve(before, after, unchanged)
	if before == nil || len(e.keyIdx) == 0 {
		return e.simple(dst, src, change.OpUpdate, before, resolved, unavail)
	}
	if err := e.knownKey(unavail); err != nil {
		return dst, err
	}
	// The keys alone are compared first: under REPLICA IDENTITY DEFAULT PostgreSQL sends the
	// old tuple only when the key changed.
	var err error
	if e.oldKey, err = e.enc.AppendKey(e.oldKey[:0], before); err != nil {
		return dst, err
	}
	if e.newKey, err = e.enc.AppendKey(e.newKey[:0], resolved); err != nil {
		return dst, err
	}
	if !bytes.Equal(e.oldKey, e.newKey) {
		return e.keyChange(dst, src, before, resolved, unavail)
	}
	return e.simple(dst, src, change.OpUpdate, before, resolved, unavail)
}

// keyChange appends the records of an update whose key changed: a delete of the old key, its
// tombstone when tombstones are on, and a create of the new key, each naming both keys.
func (e *Encoder) keyChange(dst []change.Record, src Source, before, resolved [][]byte, unavail []bool) ([]change.Record, error) {
	oldKey, delVal, err := e.encodeKept(e.change(src, change.OpDelete, before, nil, nil), true)
	if err != nil {
		return dst, err
	}
	delHdr := e.lastHdr
	newKey, val, err := e.encodeKept(e.change(src, change.OpCreate, nil, resolved, unavail), true)
	if err != nil {
		return dst, err
	}
	createHdr := e.lastHdr
	lsn := e.lsnText(src.LSN)
	unch := e.unchangedNames(unavail)
	e.lastHdr = delHdr
	dst = e.appendDelete(dst, oldKey, delVal, lsn, oldKey, newKey)
	e.lastHdr = createHdr
	return append(dst, change.Record{
		Topic: e.topic, Partition: change.AnyPartition, Key: newKey, Value: val,
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
// table and, for a table with a key (whose topic is compacted, and refuses null keys), the
// format's key with no columns: {} (json-with-schema: a struct <topic>.TruncateKey with no fields).
func (e *Encoder) Truncate(dst []change.Record, src Source) ([]change.Record, error) {
	key, val, err := e.encodeKept(e.change(src, change.OpTruncate, nil, nil, nil), false)
	if err != nil {
		return dst, err
	}
	return append(dst, change.Record{
		Topic: e.topic, Partition: change.AllPartitions, Key: key, Value: val,
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
	if err := e.knownKey(unavail); err != nil {
		return dst, err
	}
	key, val, err := e.encodeKept(e.change(src, op, before, after, unavail), false)
	if err != nil {
		return dst, err
	}
	return append(dst, change.Record{
		Topic: e.topic, Partition: change.AnyPartition, Key: key, Value: val,
		Headers: e.headers(e.lsnText(src.LSN), op, nil, nil, e.unchangedNames(unavail)),
	}), nil
}

// change returns the format's description of one record, in a buffer e reuses.
func (e *Encoder) change(src Source, op change.Op, before, after [][]byte, unavail []bool) *format.Change {
	e.ch = format.Change{
		Op: op,
		Source: format.Source{LSN: src.LSN, Xid: src.Xid, Seq: src.Seq, TsMs: unixMilli(src.Time),
			Snapshot: src.Snapshot, Attempt: src.Attempt},
		TsMs:   unixMilli(e.now()),
		Before: before, After: after, Unavail: unavail,
	}
	return &e.ch
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// knownKey returns the error of a record whose key column PostgreSQL did not send.
func (e *Encoder) knownKey(unavail []bool) error {
	if unavail == nil {
		return nil
	}
	for _, c := range e.keyIdx {
		if unavail[c] {
			return fmt.Errorf("encode update of %s: key column %q is an unchanged out-of-line value that PostgreSQL did not send, so the record has no key; set REPLICA IDENTITY FULL on the table",
				e.table.Export, e.table.Columns[c].Name)
		}
	}
	return nil
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
		b = append(b, e.names[i]...)
	}
	b = append(b, ']')
	e.scratch = b
	return e.own(b)
}

func (e *Encoder) checkRow(what string, row [][]byte) error {
	if len(row) != len(e.table.Columns) {
		return fmt.Errorf("encode %s of %s: %w: %d values for %d columns", what, e.table.Export, ErrRowShape, len(row), len(e.table.Columns))
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
