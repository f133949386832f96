package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// header is one record header.
type header = kgo.RecordHeader

// errEnvelope is wrapped by the error of a record that is not a Tidemark envelope.
var errEnvelope = errors.New("not a tidemark change envelope")

// decodeChange reads one data record: the json envelope, or json-with-schema's payload. It
// scans the JSON once and keeps before, after and the key as slices of the record (no copy);
// only the source block's fields are parsed.
func decodeChange(ch *Change, e change.ExportID, topic string, partition int32, offset int64, key, value []byte, headers []header) error {
	*ch = Change{Export: e, Topic: topic, Partition: partition, Offset: offset}
	fail := func(msg string) error {
		return fmt.Errorf("%s[%d] offset %d: %w: %s", topic, partition, offset, errEnvelope, msg)
	}
	var env envelopeFields
	if !env.scan(value) {
		return fail("value is not a JSON object")
	}
	withSchema := false
	if env.payload != nil && env.schema != nil {
		payload := env.payload
		ch.Schema = env.schema
		env = envelopeFields{}
		if !env.scan(payload) {
			return fail("payload is not a JSON object")
		}
		withSchema = true
	}
	op := env.op
	if len(op) != 3 || op[0] != '"' || op[2] != '"' {
		return fail("no op")
	}
	ch.Op = change.Op(op[1])
	switch ch.Op {
	case change.OpRead, change.OpCreate, change.OpUpdate, change.OpDelete, change.OpTruncate:
	default:
		return fail("unknown op " + string(op))
	}
	ch.Before, ch.After = nullable(env.before), nullable(env.after)
	var src sourceFields
	if !src.scan(env.source) {
		return fail("no source")
	}
	lsn, err := strconv.ParseUint(unsafeString(src.lsn), 10, 64)
	if err != nil {
		return fail("source.lsn is not a number")
	}
	ch.Source.LSN = change.LSN(lsn)
	if v := src.txID; v != nil {
		x, err := strconv.ParseUint(unsafeString(v), 10, 32)
		if err != nil {
			return fail("source.txId is not a number")
		}
		ch.Source.TxID = uint32(x)
	}
	if v := src.sequence; v != nil {
		if ch.Source.Sequence, err = strconv.ParseInt(unsafeString(v), 10, 64); err != nil {
			return fail("source.sequence is not a number")
		}
	}
	if v := src.tsMs; v != nil {
		ch.Source.TsMs, _ = strconv.ParseInt(unsafeString(v), 10, 64)
	}
	if v := src.attempt; v != nil {
		ch.Source.Attempt, _ = strconv.Atoi(unsafeString(v))
	}
	snap := src.snapshot
	ch.Source.Snapshot = string(snap) == "true" || string(snap) == `"true"` || ch.Op == change.OpRead
	ch.Source.DB, ch.Source.Schema, ch.Source.Table = jsonString(src.db), jsonString(src.schema), jsonString(src.table)
	ch.Key = key
	if withSchema {
		ch.Key = payloadOf(key)
	}
	for _, h := range headers {
		switch h.Key {
		case codec.HeaderUnchanged:
			if err := json.Unmarshal(h.Value, &ch.Unchanged); err != nil {
				return fail("header " + codec.HeaderUnchanged + " is not a JSON array of names")
			}
		case codec.HeaderOldKey:
			ch.OldKey = h.Value
		case codec.HeaderNewKey:
			ch.NewKey = h.Value
		}
	}
	if withSchema {
		ch.OldKey, ch.NewKey = payloadOf(ch.OldKey), payloadOf(ch.NewKey)
	}
	return nil
}

// payloadOf returns the payload of a json-with-schema key ({"schema":...,"payload":{...}}), or
// b itself when it has none.
func payloadOf(b []byte) []byte {
	if b == nil {
		return nil
	}
	var pl []byte
	if eachField(b, func(name string, v []byte) {
		if name == "payload" {
			pl = v
		}
	}) && pl != nil {
		return pl
	}
	return b
}

// envelopeFields are the fields of an envelope (or of json-with-schema's outer object).
type envelopeFields struct {
	before, after, source, op, payload, schema []byte
}

func (f *envelopeFields) scan(b []byte) bool {
	return eachField(b, func(name string, v []byte) {
		switch name {
		case "before":
			f.before = v
		case "after":
			f.after = v
		case "source":
			f.source = v
		case "op":
			f.op = v
		case "payload":
			f.payload = v
		case "schema":
			f.schema = v
		}
	})
}

// sourceFields are the fields of the source block the reader uses.
type sourceFields struct {
	lsn, txID, sequence, tsMs, attempt, snapshot, db, schema, table []byte
}

func (f *sourceFields) scan(b []byte) bool {
	return eachField(b, func(name string, v []byte) {
		switch name {
		case "lsn":
			f.lsn = v
		case "txId":
			f.txID = v
		case "sequence":
			f.sequence = v
		case "ts_ms":
			f.tsMs = v
		case "attempt":
			f.attempt = v
		case "snapshot":
			f.snapshot = v
		case "db":
			f.db = v
		case "schema":
			f.schema = v
		case "table":
			f.table = v
		}
	})
}

// nullable returns nil for a JSON null.
func nullable(b []byte) json.RawMessage {
	if b == nil || string(b) == "null" {
		return nil
	}
	return b
}

// jsonString returns a JSON string's text (unescaping only when needed), "" for anything else.
func jsonString(b []byte) string {
	if len(b) < 2 || b[0] != '"' {
		return ""
	}
	if bytes.IndexByte(b, '\\') < 0 {
		return string(b[1 : len(b)-1])
	}
	var s string
	_ = json.Unmarshal(b, &s)
	return s
}

// Fields calls fn with the name and the raw JSON value of each field of the JSON object obj (a
// Change's Key, Before or After), in order, without copying: the name is valid only during the
// call, the value as long as obj. It reports whether obj is one well-formed object; fields
// whose names carry escapes are skipped.
func Fields(obj []byte, fn func(name string, value []byte)) bool { return eachField(obj, fn) }

// eachField calls fn with each field of the JSON object b (names with escapes are skipped; the
// name string is only valid during the call). ok is false when b is not one well-formed object.
func eachField(b []byte, fn func(name string, v []byte)) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		end, ok := skipString(b, i)
		if !ok {
			return false
		}
		name := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		vend, ok := skipValue(b, i)
		if !ok {
			return false
		}
		if bytes.IndexByte(name, '\\') < 0 {
			fn(unsafeString(name), b[i:vend])
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return skipSpace(b, i+1) == len(b)
		default:
			return false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the JSON string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index after the JSON value starting at b[i]. Nested objects and arrays
// are matched by brackets (strings skipped); scalars run to the next delimiter.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, ok := skipString(b, j)
				if !ok {
					return 0, false
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := i
	for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\n' && b[j] != '\t' && b[j] != '\r' {
		j++
	}
	return j, j > i
}

// unsafeString views b as a string for parsing or comparing (no copy; never kept).
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
