package json

import (
	"context"
	"fmt"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
)

// Name is the format's CDC_VALUE_FORMAT value.
const Name = "json"

// Format is the plain JSON format. Its zero value is ready to use.
type Format struct{}

var _ format.Format = Format{}

// Name returns "json".
func (Format) Name() string { return Name }

// Prepare does nothing: every type maps by its OID alone.
func (Format) Prepare(context.Context, format.Config, *change.Table) error { return nil }

// column is the precomputed encoding state of one column.
type column struct {
	name []byte // `"name":`, JSON-escaped
	oid  uint32
	kind pgjson.Kind
}

// table is what an encoder of one table shares with its clones; it is never written after
// NewEncoder.
type table struct {
	cfg     format.Config
	t       *change.Table
	cols    []column
	keyIdx  []int
	srcHead []byte // `"source":{..."table":"t","lsn":`
	// placeholder is Config.Placeholder as a JSON string (UnchangedPlaceholder).
	placeholder []byte
}

// encoder writes one table's records as plain JSON.
type encoder struct {
	*table
	spans   []int  // value offsets in dst of the row encoded last, 2 per column (-1: left out)
	scratch []byte // array element unescaping
}

// NewEncoder returns the encoder of t's records.
func (Format) NewEncoder(cfg format.Config, t *change.Table) (format.TableEncoder, error) {
	cols := make([]column, len(t.Columns))
	for i, c := range t.Columns {
		name := pgjson.AppendString(nil, []byte(c.Name))
		cols[i] = column{name: append(name, ':'), oid: c.TypeOID, kind: pgjson.KindOf(c.TypeOID)}
	}
	return &encoder{table: &table{
		cfg: cfg, t: t, cols: cols, keyIdx: t.KeyColumns(),
		srcHead:     pgjson.SourceHead(cfg.TopicPrefix, cfg.Database, t.Export),
		placeholder: pgjson.AppendString(nil, []byte(cfg.Placeholder)),
	}}, nil
}

// Clone returns an encoder sharing e's table with buffers of its own.
func (e *encoder) Clone() format.TableEncoder { return &encoder{table: e.table} }

// Encode appends the envelope of ch, then its key: the key columns' values cut out of the row
// just written (after, or before when after is null), so no value is encoded twice.
func (e *encoder) Encode(dst []byte, ch *format.Change) (format.Encoded, error) {
	base := len(dst)
	if ch.Key != nil {
		dst = append(dst, `{"before":`...)
		dst = append(dst, ch.Key...)
		dst = append(dst, `,"after":null`...)
		dst = pgjson.AppendTail(dst, e.srcHead, ch, false)
		v := len(dst) - base
		dst = append(dst, ch.Key...)
		return format.Encoded{Buf: dst, Value: v, Key: len(ch.Key)}, nil
	}
	dst = append(dst, '{')
	var err error
	if dst, err = e.appendSection(dst, `"before"`, ch.Before, nil); err != nil {
		return format.Encoded{Buf: dst}, err
	}
	dst = append(dst, ',')
	if dst, err = e.appendSection(dst, `"after"`, ch.After, ch.Unavail); err != nil {
		return format.Encoded{Buf: dst}, err
	}
	dst = pgjson.AppendTail(dst, e.srcHead, ch, false)
	v := len(dst) - base
	if len(e.keyIdx) == 0 {
		return format.Encoded{Buf: dst, Value: v}, nil
	}
	if ch.Op == change.OpTruncate {
		// A key with no columns: a compacted topic refuses null keys, and no row's key has none.
		dst = append(dst, "{}"...)
		return format.Encoded{Buf: dst, Value: v, Key: 2}, nil
	}
	dst = append(dst, '{')
	for i, c := range e.keyIdx {
		if e.spans[2*c] < 0 {
			return format.Encoded{Buf: dst}, fmt.Errorf("encode key of %s: key column %q has no value", e.t.Export, e.t.Columns[c].Name)
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e.cols[c].name...)
		dst = append(dst, dst[e.spans[2*c]:e.spans[2*c+1]]...)
	}
	dst = append(dst, '}')
	return format.Encoded{Buf: dst, Value: v, Key: len(dst) - base - v}, nil
}

// AppendKey appends the key object of row.
func (e *encoder) AppendKey(dst []byte, row [][]byte) ([]byte, error) {
	dst = append(dst, '{')
	for i, c := range e.keyIdx {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e.cols[c].name...)
		var err error
		if dst, err = e.appendColumn(dst, c, row, nil); err != nil {
			return dst, err
		}
	}
	return append(dst, '}'), nil
}

// appendColumn appends the JSON value of column i of row.
func (e *encoder) appendColumn(dst []byte, i int, row [][]byte, unavail []bool) ([]byte, error) {
	if unavail != nil && unavail[i] {
		return append(dst, e.placeholder...), nil
	}
	c := &e.cols[i]
	out, err := pgjson.AppendKind(dst, c.kind, c.oid, row[i], &e.scratch)
	if err != nil {
		return dst, &format.ValueError{Column: e.t.Columns[i].Name, Export: e.t.Export, Err: err}
	}
	return out, nil
}

// appendSection appends one side of the envelope: name (`"before"` or `"after"`) and row, or
// null when there is no row.
func (e *encoder) appendSection(dst []byte, name string, row [][]byte, unavail []bool) ([]byte, error) {
	dst = append(dst, name...)
	dst = append(dst, ':')
	if row == nil {
		return append(dst, "null"...), nil
	}
	return e.appendRow(dst, row, unavail)
}

// appendRow appends a row as a JSON object and records each value's span in e.spans.
func (e *encoder) appendRow(dst []byte, row [][]byte, unavail []bool) ([]byte, error) {
	if cap(e.spans) < 2*len(e.cols) {
		e.spans = make([]int, 2*len(e.cols))
	}
	e.spans = e.spans[:2*len(e.cols)]
	dst = append(dst, '{')
	omit := unavail != nil && e.cfg.Unchanged != format.UnchangedPlaceholder
	first := true
	for i := range e.cols {
		if omit && unavail[i] {
			e.spans[2*i], e.spans[2*i+1] = -1, -1
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, e.cols[i].name...)
		e.spans[2*i] = len(dst)
		var err error
		if dst, err = e.appendColumn(dst, i, row, unavail); err != nil {
			return dst, err
		}
		e.spans[2*i+1] = len(dst)
	}
	return append(dst, '}'), nil
}
