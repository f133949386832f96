package connectjson

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/internal/pgjson"
)

// Name is the format's CDC_VALUE_FORMAT value.
const Name = "json-with-schema"

// HeaderArrayDims gives the shape of array values that are not one dimension starting at
// index 1, which the payload writes flattened: {"after":{"col":"[0:2]"},"before":{...}}.
const HeaderArrayDims = "tidemark.array_dims"

// Format is Kafka Connect's JsonConverter format with schemas.enable=true. Its zero value is
// ready to use.
type Format struct{}

var _ format.Format = Format{}

// Name returns "json-with-schema".
func (Format) Name() string { return Name }

// Prepare reads the types of t's columns that are not built in into cfg.Types.
func (Format) Prepare(ctx context.Context, cfg format.Config, t *change.Table) error {
	if cfg.Types == nil || t == nil {
		return nil
	}
	return cfg.Types.ResolveTable(ctx, t, StaticType)
}

// column is the precomputed encoding state of one column.
type column struct {
	name []byte // `"name":`, JSON-escaped
	node *node
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
	// `{"schema":<schema>,"payload":` of values and keys: the schemas depend only on the table.
	valHead, keyHead []byte
	truncKey         []byte // the key of a truncate: a struct <topic>.TruncateKey with no fields
}

// encoder writes one table's records in json-with-schema.
type encoder struct {
	*table
	spans   []int // value offsets in dst of the row encoded last, 2 per column (-1: left out)
	conv    converter
	dims    []byte // HeaderArrayDims of the record being encoded, or empty
	dimsSec bool   // dims has an open section
	section string // `"before"` or `"after"` while a row of the envelope is encoded
}

// NewEncoder returns the encoder of t's records. Every column's type must be known: built in,
// or in cfg.Types (Prepare).
func (Format) NewEncoder(cfg format.Config, t *change.Table) (format.TableEncoder, error) {
	cols := make([]column, len(t.Columns))
	for i, c := range t.Columns {
		n, err := buildNode(cfg.Types, c.TypeOID, c.TypeMod, 0)
		if err != nil {
			return nil, fmt.Errorf("new encoder for %s: column %q: %w", t.Export, c.Name, err)
		}
		name := pgjson.AppendString(nil, []byte(c.Name))
		cols[i] = column{name: append(name, ':'), node: n}
	}
	topic := change.TopicName(cfg.TopicPrefix, t.Export)
	tb := &table{
		cfg: cfg, t: t, cols: cols, keyIdx: t.KeyColumns(),
		srcHead:     pgjson.SourceHead(cfg.TopicPrefix, cfg.Database, t.Export),
		placeholder: pgjson.AppendString(nil, []byte(cfg.Placeholder)),
	}
	tb.valHead, tb.keyHead = connectHeads(topic, t, cols)
	k := append([]byte(`{"schema":{"type":"struct","fields":[],"optional":false,"name":`), pgjson.AppendString(nil, []byte(topic+".TruncateKey"))...)
	tb.truncKey = append(k, `},"payload":{}}`...)
	return &encoder{table: tb}, nil
}

// Clone returns an encoder sharing e's table with buffers of its own.
func (e *encoder) Clone() format.TableEncoder { return &encoder{table: e.table} }

// Encode appends {"schema":..,"payload":<envelope>} of ch, then its key (the key columns'
// payloads cut out of the row just written), then HeaderArrayDims when an array needs it.
func (e *encoder) Encode(dst []byte, ch *format.Change) (format.Encoded, error) {
	base := len(dst)
	e.dims, e.dimsSec = e.dims[:0], false
	if ch.Key != nil {
		// before is the key's payload (its fields are the key columns of the value schema; the
		// others are optional).
		dst = append(dst, e.valHead...)
		dst = append(dst, `{"before":`...)
		dst = append(dst, keyPayload(e.keyHead, ch.Key)...)
		dst = append(dst, `,"after":null`...)
		dst = pgjson.AppendTail(dst, e.srcHead, ch, true)
		dst = append(dst, '}')
		v := len(dst) - base
		dst = append(dst, ch.Key...)
		return format.Encoded{Buf: dst, Value: v, Key: len(ch.Key)}, nil
	}
	dst = append(dst, e.valHead...)
	dst = append(dst, '{')
	var err error
	if dst, err = e.appendSection(dst, `"before"`, ch.Before, nil); err != nil {
		return format.Encoded{Buf: dst}, err
	}
	dst = append(dst, ',')
	if dst, err = e.appendSection(dst, `"after"`, ch.After, ch.Unavail); err != nil {
		return format.Encoded{Buf: dst}, err
	}
	if len(e.dims) > 0 {
		e.dims = append(e.dims, '}')
	}
	dst = pgjson.AppendTail(dst, e.srcHead, ch, true)
	dst = append(dst, '}')
	v := len(dst) - base
	k := 0
	switch {
	case len(e.keyIdx) == 0:
	case ch.Op == change.OpTruncate:
		dst = append(dst, e.truncKey...)
		k = len(e.truncKey)
	default:
		dst = append(dst, e.keyHead...)
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
		dst = append(dst, "}}"...)
		k = len(dst) - base - v
	}
	if len(e.dims) == 0 {
		return format.Encoded{Buf: dst, Value: v, Key: k}, nil
	}
	dst = append(dst, e.dims...)
	return format.Encoded{Buf: dst, Value: v, Key: k, HeaderKey: HeaderArrayDims, HeaderLen: len(e.dims)}, nil
}

// AppendKey appends the key of row: {"schema":<key schema>,"payload":{<key columns>}}.
func (e *encoder) AppendKey(dst []byte, row [][]byte) ([]byte, error) {
	dst = append(dst, e.keyHead...)
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
	return append(dst, "}}"...), nil
}

// appendSection appends one side of the envelope: name (`"before"` or `"after"`) and row, or
// null when there is no row. While row is encoded, e.section names the side for HeaderArrayDims.
func (e *encoder) appendSection(dst []byte, name string, row [][]byte, unavail []bool) ([]byte, error) {
	dst = append(dst, name...)
	dst = append(dst, ':')
	if row == nil {
		return append(dst, "null"...), nil
	}
	e.section = name
	dst, err := e.appendRow(dst, row, unavail)
	e.section = ""
	if err != nil {
		return dst, err
	}
	if e.dimsSec {
		e.dims = append(e.dims, '}')
		e.dimsSec = false
	}
	return dst, nil
}

// appendRow appends a row's payload as a JSON object and records each value's span in e.spans.
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

// appendColumn appends the payload of column i of row.
func (e *encoder) appendColumn(dst []byte, i int, row [][]byte, unavail []bool) ([]byte, error) {
	c := &e.cols[i]
	if unavail != nil && unavail[i] {
		// The value is unknown (UnchangedPlaceholder; UnchangedOmit never gets here). The
		// placeholder string fits only a string column's schema; other columns get null, and the
		// unchanged header names the column either way.
		if c.node.typ == "string" {
			return append(dst, e.placeholder...), nil
		}
		return append(dst, "null"...), nil
	}
	e.conv.shape = e.conv.shape[:0]
	out, err := e.conv.appendConnect(dst, c.node, row[i], true)
	if err != nil {
		return dst, &format.ValueError{Column: e.t.Columns[i].Name, Export: e.t.Export, Err: err}
	}
	if shape := e.conv.shape; len(shape) > 0 && e.section != "" {
		if len(e.dims) == 0 {
			e.dims = append(e.dims, '{')
		}
		if !e.dimsSec {
			if len(e.dims) > 1 {
				e.dims = append(e.dims, ',')
			}
			e.dims = append(e.dims, e.section...)
			e.dims = append(e.dims, ":{"...)
			e.dimsSec = true
		} else {
			e.dims = append(e.dims, ',')
		}
		e.dims = append(e.dims, c.name...)
		e.dims = pgjson.AppendString(e.dims, shape)
	}
	return out, nil
}

// connectHeads returns the `{"schema":<envelope schema>,"payload":` and `{"schema":<key
// schema>,"payload":` prefixes of an export's values and keys. The schemas depend only on the
// table, so they are built once per encoder; a record adds only its payload.
func connectHeads(topic string, t *change.Table, cols []column) (val, key []byte) {
	row := func(dst []byte, name string, keysOnly bool, optional bool, field string) []byte {
		dst = append(dst, `{"type":"struct","fields":[`...)
		first := true
		for i, c := range cols {
			if keysOnly && !t.Columns[i].Key {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = appendSchema(dst, c.node, !t.Columns[i].Key, t.Columns[i].Name)
		}
		dst = append(dst, `],"optional":`...)
		if optional {
			dst = append(dst, "true"...)
		} else {
			dst = append(dst, "false"...)
		}
		dst = append(dst, `,"name":`...)
		dst = pgjson.AppendString(dst, []byte(name))
		if field != "" {
			dst = append(dst, `,"field":"`...)
			dst = append(dst, field...)
			dst = append(dst, '"')
		}
		return append(dst, '}')
	}
	v := []byte(`{"schema":{"type":"struct","fields":[`)
	v = row(v, topic+".Value", false, true, "before")
	v = append(v, ',')
	v = row(v, topic+".Value", false, true, "after")
	v = append(v, `,{"type":"struct","fields":[`+
		`{"type":"string","optional":false,"field":"version"},`+
		`{"type":"string","optional":false,"field":"connector"},`+
		`{"type":"string","optional":false,"field":"name"},`+
		`{"type":"string","optional":false,"field":"db"},`+
		`{"type":"string","optional":false,"field":"schema"},`+
		`{"type":"string","optional":false,"field":"table"},`+
		`{"type":"int64","optional":true,"field":"lsn"},`+
		`{"type":"string","optional":true,"field":"lsn_text"},`+
		`{"type":"int64","optional":true,"field":"txId"},`+
		`{"type":"int64","optional":true,"field":"sequence"},`+
		`{"type":"string","optional":true,"name":"io.debezium.data.Enum","version":1,"parameters":{"allowed":"true,false"},"default":"false","field":"snapshot"},`+
		`{"type":"int32","optional":true,"field":"attempt"},`+
		`{"type":"int64","optional":false,"field":"ts_ms"}`+
		`],"optional":false,"name":"io.debezium.connector.postgresql.Source","field":"source"},`+
		`{"type":"string","optional":false,"field":"op"},`+
		`{"type":"int64","optional":true,"field":"ts_ms"}],"optional":false,"name":`...)
	v = pgjson.AppendString(v, []byte(topic+".Envelope"))
	v = append(v, `,"version":2},"payload":`...)
	k := []byte(`{"schema":`)
	k = row(k, topic+".Key", true, false, "")
	k = append(k, `,"payload":`...)
	return v, k
}

// keyPayload returns the payload of a json-with-schema key: the bytes after head when the key was
// written with this schema, else its "payload" member, else the key itself (a key written in the
// plain JSON format is already the object of key columns).
func keyPayload(head, key []byte) []byte {
	if bytes.HasPrefix(key, head) && len(key) > len(head) && key[len(key)-1] == '}' {
		return key[len(head) : len(key)-1]
	}
	var k struct {
		Payload json.RawMessage `json:"payload"`
	}
	if json.Unmarshal(key, &k) == nil && len(k.Payload) > 0 {
		return k.Payload
	}
	return key
}
