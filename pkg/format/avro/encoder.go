package avro

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/connectjson"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
	"github.com/tidemark/cdc/pkg/schemareg"
	"github.com/twmb/franz-go/pkg/sr"
)

// Name is the format's CDC_VALUE_FORMAT value.
const Name = "avro"

// HeaderArrayDims gives the shape of array values that are not one dimension starting at index
// 1, which the record writes flattened: {"after":{"col":"[0:2]"},"before":{...}}. It is
// json-with-schema's header of the same name and meaning.
const HeaderArrayDims = "tidemark.array_dims"

// Version is source.version in every envelope.
const Version = pgjson.Version

// ErrNoRegistry is returned when the format is used without a schema registry.
var ErrNoRegistry = errors.New("the avro format needs a schema registry: set CDC_SCHEMA_REGISTRY_URL")

// Format is Avro in Confluent's wire format, with Debezium's schemas, registered in a schema
// registry (format.Config.Registry). Its zero value is ready to use.
type Format struct{}

var _ format.Format = Format{}

// Name returns "avro".
func (Format) Name() string { return Name }

// Subjects returns the registry subjects of a topic's keys and values (TopicNameStrategy), and
// the one of its truncate key.
func Subjects(topic string) (key, value, truncKey string) {
	return topic + "-key", topic + "-value", topic + "-truncate-key"
}

// Prepare reads the types of t's columns that are not built in into cfg.Types, then registers
// t's schemas in cfg.Registry (or finds them there), so that NewEncoder has their ids. A schema
// the registry refuses as incompatible is an error wrapping *schemareg.IncompatibleError; an
// unreachable registry is retried until ctx ends. A refused schema wraps format.ErrSchemaRefused
// too.
func (Format) Prepare(ctx context.Context, cfg format.Config, t *change.Table) error {
	if t == nil {
		return nil
	}
	if cfg.Registry == nil {
		return ErrNoRegistry
	}
	if cfg.Types != nil {
		if err := cfg.Types.ResolveTable(ctx, t, connectjson.StaticType); err != nil {
			return err
		}
	}
	tb, err := newTable(cfg, t)
	if err != nil {
		return err
	}
	_, err = tb.register(ctx, cfg.Registry)
	if re, ok := errors.AsType[*sr.ResponseError](err); errors.As(err, new(*schemareg.IncompatibleError)) ||
		ok && re.StatusCode == http.StatusUnprocessableEntity {
		// Refused under the subject's rules, or as an invalid schema: this table's alone.
		return refusedError{err}
	}
	return err
}

// refusedError is a schema the registry refused: its text is the registry client's, and it
// wraps format.ErrSchemaRefused, which stops the table's export alone.
type refusedError struct{ err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{e.err, format.ErrSchemaRefused} }

// ids are the registry's ids of one table's schemas.
type ids struct {
	value, key, truncKey schemareg.ID
}

// register registers the table's schemas under their subjects and returns their ids.
func (tb *table) register(ctx context.Context, reg *schemareg.Client) (ids, error) {
	kSub, vSub, tSub := Subjects(tb.topic)
	var out ids
	var err error
	if out.value, err = reg.Register(ctx, vSub, sr.TypeAvro, tb.schemas.value); err != nil {
		return out, fmt.Errorf("schema of %s: %w", tb.t.Export, err)
	}
	if len(tb.keyIdx) == 0 {
		return out, nil
	}
	if out.key, err = reg.Register(ctx, kSub, sr.TypeAvro, tb.schemas.key); err != nil {
		return out, fmt.Errorf("key schema of %s: %w", tb.t.Export, err)
	}
	if out.truncKey, err = reg.Register(ctx, tSub, sr.TypeAvro, tb.schemas.truncKey); err != nil {
		return out, fmt.Errorf("truncate key schema of %s: %w", tb.t.Export, err)
	}
	return out, nil
}

// table is what an encoder of one table shares with its clones; it is never written after
// NewEncoder.
type table struct {
	cfg     format.Config
	t       *change.Table
	topic   string
	cols    []*node
	keyIdx  []int
	isKey   []bool
	schemas schemas
	ids     ids
	// srcHead is the source block's fields that depend on the table (version .. table).
	srcHead []byte
	// valHead, keyHead and truncKey are the 5-byte headers of values and keys, and the whole
	// key of a truncate (a record without fields is no bytes).
	valHead, keyHead, truncKey []byte
}

func newTable(cfg format.Config, t *change.Table) (*table, error) {
	cols := make([]*node, len(t.Columns))
	isKey := make([]bool, len(t.Columns))
	for i, c := range t.Columns {
		n, err := buildNode(cfg.Types, c.TypeOID, c.TypeMod, 0)
		if err != nil {
			return nil, fmt.Errorf("new encoder for %s: column %q: %w", t.Export, c.Name, err)
		}
		cols[i], isKey[i] = n, c.Key
	}
	topic := change.TopicName(cfg.TopicPrefix, t.Export)
	var h []byte
	for _, s := range []string{Version, "tidemark", cfg.TopicPrefix, cfg.Database, t.Export.Schema, t.Export.Table} {
		h = appendBytes(h, []byte(s))
	}
	return &table{cfg: cfg, t: t, topic: topic, cols: cols, keyIdx: t.KeyColumns(), isKey: isKey,
		schemas: tableSchemas(topic, t, cols), srcHead: h}, nil
}

// encoder writes one table's records.
type encoder struct {
	*table
	spans []int // offsets in dst of the key columns of the row encoded last, 2 per column
	conv  converter
	dims  []byte // HeaderArrayDims of the record being encoded, or empty
	// dimsAfter: e.dims has the after section open.
	dimsAfter bool
}

// NewEncoder returns the encoder of t's records. Prepare must have registered t's schemas with
// the same configuration: NewEncoder takes their ids from the registry client's cache and never
// writes an id the registry did not return.
func (Format) NewEncoder(cfg format.Config, t *change.Table) (format.TableEncoder, error) {
	if cfg.Registry == nil {
		return nil, fmt.Errorf("new encoder for %s: %w", t.Export, ErrNoRegistry)
	}
	tb, err := newTable(cfg, t)
	if err != nil {
		return nil, err
	}
	// A context already ended: the client answers from its cache, never from the network.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if tb.ids, err = tb.register(ctx, cfg.Registry); err != nil {
		return nil, fmt.Errorf("new encoder for %s: the schemas are not registered (Prepare registers them): %w", t.Export, err)
	}
	tb.valHead = appendHeader(nil, tb.ids.value)
	tb.keyHead = appendHeader(nil, tb.ids.key)
	tb.truncKey = appendHeader(nil, tb.ids.truncKey)
	return &encoder{table: tb}, nil
}

// Clone returns an encoder sharing e's table with buffers of its own.
func (e *encoder) Clone() format.TableEncoder { return &encoder{table: e.table} }

// Encode appends the envelope of ch, then its key: the key columns' bytes cut out of the row just
// written (key columns are required in both records, so their bytes are the same).
func (e *encoder) Encode(dst []byte, ch *format.Change) (format.Encoded, error) {
	base := len(dst)
	dst = append(dst, e.valHead...)
	var err error
	if ch.Key != nil {
		if dst, err = e.appendKeyRow(dst, ch.Key); err != nil {
			return format.Encoded{Buf: dst}, err
		}
		dst = append(dst, unionNull) // after
		dst = e.appendTail(dst, ch)
		v := len(dst) - base
		dst = append(dst, ch.Key...)
		return format.Encoded{Buf: dst, Value: v, Key: len(ch.Key)}, nil
	}
	e.dims, e.dimsAfter = e.dims[:0], false
	if dst, err = e.appendSection(dst, "before", ch.Before, nil); err != nil {
		return format.Encoded{Buf: dst}, err
	}
	if dst, err = e.appendSection(dst, "after", ch.After, ch.Unavail); err != nil {
		return format.Encoded{Buf: dst}, err
	}
	if len(e.dims) > 0 {
		e.dims = append(e.dims, "}}"...)
	}
	dst = e.appendTail(dst, ch)
	v := len(dst) - base
	k := 0
	switch {
	case len(e.keyIdx) == 0:
	case ch.Op == change.OpTruncate:
		dst = append(dst, e.truncKey...)
		k = len(e.truncKey)
	default:
		dst = append(dst, e.keyHead...)
		for _, c := range e.keyIdx {
			if e.spans[2*c] < 0 {
				return format.Encoded{Buf: dst}, fmt.Errorf("encode key of %s: key column %q has no value", e.t.Export, e.t.Columns[c].Name)
			}
			dst = append(dst, dst[e.spans[2*c]:e.spans[2*c+1]]...)
		}
		k = len(dst) - base - v
	}
	if len(e.dims) == 0 {
		return format.Encoded{Buf: dst, Value: v, Key: k}, nil
	}
	dst = append(dst, e.dims...)
	return format.Encoded{Buf: dst, Value: v, Key: k, HeaderKey: HeaderArrayDims, HeaderLen: len(e.dims)}, nil
}

// AppendKey appends the key of row.
func (e *encoder) AppendKey(dst []byte, row [][]byte) ([]byte, error) {
	dst = append(dst, e.keyHead...)
	for _, c := range e.keyIdx {
		var err error
		if dst, err = e.appendColumn(dst, c, row[c]); err != nil {
			return dst, err
		}
	}
	return dst, nil
}

// appendSection appends one side of the envelope (section "before" or "after"): ["null", Value].
// The shapes of its arrays that are not one dimension from 1 go into e.dims.
func (e *encoder) appendSection(dst []byte, section string, row [][]byte, unavail []bool) ([]byte, error) {
	if row == nil {
		return append(dst, unionNull), nil
	}
	dst = append(dst, unionValue)
	if cap(e.spans) < 2*len(e.cols) {
		e.spans = make([]int, 2*len(e.cols))
	}
	e.spans = e.spans[:2*len(e.cols)]
	for i, n := range e.cols {
		text := row[i]
		switch {
		case unavail != nil && unavail[i]:
			if e.isKey[i] {
				return dst, fmt.Errorf("encode %s: key column %q has no value", e.t.Export, e.t.Columns[i].Name)
			}
			// Unknown (unchanged TOAST): the placeholder in a string column under
			// UnchangedPlaceholder, else null; the unchanged header names it either way.
			if e.cfg.Unchanged == format.UnchangedPlaceholder && n.isString() {
				dst = append(dst, unionValue)
				dst = appendBytes(dst, []byte(e.cfg.Placeholder))
			} else {
				dst = append(dst, unionNull)
			}
			continue
		case e.isKey[i]:
			// Required, and the key's bytes: their span is kept for the key.
			start := len(dst)
			var err error
			if dst, err = e.appendColumn(dst, i, text); err != nil {
				return dst, err
			}
			e.spans[2*i], e.spans[2*i+1] = start, len(dst)
		case text == nil:
			dst = append(dst, unionNull)
			continue
		default:
			var err error
			if dst, err = e.conv.convert(append(dst, unionValue), n, text); err != nil {
				return dst, &format.ValueError{Column: e.t.Columns[i].Name, Export: e.t.Export, Err: fmt.Errorf("encode %s: %w", n.label, err)}
			}
		}
		if n.kind == kArray && len(e.conv.shape) > 0 {
			e.addShape(section, i)
		}
	}
	return dst, nil
}

// addShape adds the shape of column i's array, just converted, to e.dims under section.
func (e *encoder) addShape(section string, i int) {
	switch {
	case len(e.dims) == 0:
		e.dims = append(e.dims, `{"`...)
		e.dims = append(e.dims, section...)
		e.dims = append(e.dims, `":{`...)
	case section == "after" && !e.dimsAfter:
		e.dims = append(e.dims, `},"after":{`...)
	default:
		e.dims = append(e.dims, ',')
	}
	e.dimsAfter = section == "after"
	e.dims = format.AppendJSONString(e.dims, []byte(e.t.Columns[i].Name))
	e.dims = append(e.dims, ':')
	e.dims = format.AppendJSONString(e.dims, e.conv.shape)
}

// appendColumn appends the Avro value of column i (not its union branch).
func (e *encoder) appendColumn(dst []byte, i int, text []byte) ([]byte, error) {
	if text == nil {
		return dst, &format.ValueError{Column: e.t.Columns[i].Name, Export: e.t.Export, Err: fmt.Errorf("key column is null")}
	}
	out, err := e.conv.appendValue(dst, e.cols[i], text)
	if err != nil {
		return dst, &format.ValueError{Column: e.t.Columns[i].Name, Export: e.t.Export, Err: err}
	}
	return out, nil
}

// appendKeyRow appends the before image of a delete whose row is only a key read back from the
// topic (format.Change.Key): the key's columns, null for the others.
func (e *encoder) appendKeyRow(dst []byte, key []byte) ([]byte, error) {
	id, body, err := splitHeader(key)
	if err != nil || id != e.ids.key {
		return dst, fmt.Errorf("encode delete of %s from a key read back: the key was not written with the table's key schema (id %d): %v", e.t.Export, e.ids.key, err)
	}
	dst = append(dst, unionValue)
	for i, n := range e.cols {
		if !e.isKey[i] {
			dst = append(dst, unionNull)
			continue
		}
		m, err := skip(n, body)
		if err != nil {
			return dst, fmt.Errorf("encode delete of %s from a key read back: column %q: %w", e.t.Export, e.t.Columns[i].Name, err)
		}
		dst = append(dst, body[:m]...)
		body = body[m:]
	}
	if len(body) != 0 {
		return dst, fmt.Errorf("encode delete of %s from a key read back: %d bytes left after the key's columns", e.t.Export, len(body))
	}
	return dst, nil
}

// appendTail appends the source block, op and ts_ms.
func (e *encoder) appendTail(dst []byte, ch *format.Change) []byte {
	src := &ch.Source
	dst = append(dst, e.srcHead...)
	dst = append(dst, unionValue)
	dst = appendLong(dst, int64(src.LSN))
	dst = append(dst, unionValue)
	var lsn [20]byte
	dst = appendBytes(dst, format.AppendLSN(lsn[:0], src.LSN))
	dst = append(dst, unionValue)
	dst = appendLong(dst, int64(src.Xid))
	dst = append(dst, unionValue)
	dst = appendLong(dst, src.Seq)
	dst = append(dst, unionValue)
	if src.Snapshot {
		dst = appendBytes(dst, []byte("true"))
		dst = append(dst, unionValue)
		dst = appendLong(dst, int64(src.Attempt))
	} else {
		dst = appendBytes(dst, []byte("false"))
		dst = append(dst, unionNull)
	}
	dst = appendLong(dst, src.TsMs)
	dst = append(dst, 2, byte(ch.Op)) // op: a string of one byte
	dst = append(dst, unionValue)
	return appendLong(dst, ch.TsMs)
}

// skip returns the length of the value of n's type at the start of b.
func skip(n *node, b []byte) (int, error) {
	switch n.kind {
	case kBool, kBit1:
		if len(b) < 1 {
			return 0, errShort
		}
		return 1, nil
	case kFloat:
		if len(b) < 4 {
			return 0, errShort
		}
		return 4, nil
	case kDouble:
		if len(b) < 8 {
			return 0, errShort
		}
		return 8, nil
	case kInt, kLong, kDate, kTimeMilli, kTimeMicro, kTimestampMilli, kTimestampMicro, kInterval:
		if _, m := readLong(b); m > 0 {
			return m, nil
		}
		return 0, errShort
	case kVarDecimal:
		_, m := readLong(b)
		if m == 0 {
			return 0, errShort
		}
		k, err := skipBytes(b[m:])
		return m + k, err
	case kArray:
		total := 0
		for {
			cnt, m := readLong(b[total:])
			if m == 0 {
				return 0, errShort
			}
			total += m
			if cnt == 0 {
				return total, nil
			}
			if cnt < 0 {
				_, m := readLong(b[total:])
				if m == 0 {
					return 0, errShort
				}
				total += m
				cnt = -cnt
			}
			for range cnt {
				if total >= len(b) {
					return 0, errShort
				}
				branch := b[total]
				total++
				if branch == unionNull {
					continue
				}
				k, err := skip(n.elem, b[total:])
				if err != nil {
					return 0, err
				}
				total += k
			}
		}
	}
	return skipBytes(b)
}

var errShort = errors.New("the value is cut short")

func skipBytes(b []byte) (int, error) {
	l, m := readLong(b)
	if m == 0 || l < 0 || int64(len(b)-m) < l {
		return 0, errShort
	}
	return m + int(l), nil
}
