package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

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
func decodeChange(e change.ExportID, topic string, partition int32, offset int64, key, value []byte, headers []header) (Change, error) {
	ch := Change{Export: e, Topic: topic, Partition: partition, Offset: offset}
	fail := func(msg string) error {
		return fmt.Errorf("%s[%d] offset %d: %w: %s", topic, partition, offset, errEnvelope, msg)
	}
	fields, ok := objectFields(value)
	if !ok {
		return ch, fail("value is not a JSON object")
	}
	withSchema := false
	if pl, ok := fields["payload"]; ok {
		if _, hasSchema := fields["schema"]; hasSchema {
			if fields, ok = objectFields(pl); !ok {
				return ch, fail("payload is not a JSON object")
			}
			withSchema = true
		}
	}
	op, ok := fields["op"]
	if !ok || len(op) != 3 || op[0] != '"' || op[2] != '"' {
		return ch, fail("no op")
	}
	ch.Op = change.Op(op[1])
	switch ch.Op {
	case change.OpRead, change.OpCreate, change.OpUpdate, change.OpDelete, change.OpTruncate:
	default:
		return ch, fail("unknown op " + string(op))
	}
	ch.Before, ch.After = nullable(fields["before"]), nullable(fields["after"])
	src, ok := objectFields(fields["source"])
	if !ok {
		return ch, fail("no source")
	}
	lsn, err := strconv.ParseUint(string(src["lsn"]), 10, 64)
	if err != nil {
		return ch, fail("source.lsn is not a number")
	}
	ch.Source.LSN = change.LSN(lsn)
	if v, ok := src["txId"]; ok {
		x, err := strconv.ParseUint(string(v), 10, 32)
		if err != nil {
			return ch, fail("source.txId is not a number")
		}
		ch.Source.TxID = uint32(x)
	}
	if v, ok := src["sequence"]; ok {
		if ch.Source.Sequence, err = strconv.ParseInt(string(v), 10, 64); err != nil {
			return ch, fail("source.sequence is not a number")
		}
	}
	if v, ok := src["ts_ms"]; ok {
		ch.Source.TsMs, _ = strconv.ParseInt(string(v), 10, 64)
	}
	if v, ok := src["attempt"]; ok {
		a, _ := strconv.Atoi(string(v))
		ch.Source.Attempt = a
	}
	snap := src["snapshot"]
	ch.Source.Snapshot = string(snap) == "true" || string(snap) == `"true"` || ch.Op == change.OpRead
	ch.Source.DB, ch.Source.Schema, ch.Source.Table = jsonString(src["db"]), jsonString(src["schema"]), jsonString(src["table"])
	ch.Key = key
	if withSchema && key != nil {
		if kf, ok := objectFields(key); ok {
			if pl, ok := kf["payload"]; ok {
				ch.Key = pl
			}
		}
	}
	for _, h := range headers {
		switch h.Key {
		case codec.HeaderUnchanged:
			if err := json.Unmarshal(h.Value, &ch.Unchanged); err != nil {
				return ch, fail("header " + codec.HeaderUnchanged + " is not a JSON array of names")
			}
		case codec.HeaderOldKey:
			ch.OldKey = h.Value
		case codec.HeaderNewKey:
			ch.NewKey = h.Value
		}
	}
	return ch, nil
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

// objectFields splits a JSON object into its fields' raw values (slices of b). ok is false when
// b is not one well-formed object.
func objectFields(b []byte) (map[string][]byte, bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	out := make(map[string][]byte, 8)
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return out, skipSpace(b, i+1) == len(b)
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return nil, false
		}
		end, ok := skipString(b, i)
		if !ok {
			return nil, false
		}
		name := b[i+1 : end-1]
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return nil, false
		}
		i = skipSpace(b, i+1)
		vend, ok := skipValue(b, i)
		if !ok {
			return nil, false
		}
		if bytes.IndexByte(name, '\\') < 0 {
			out[string(name)] = b[i:vend]
		}
		i = skipSpace(b, vend)
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return out, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
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
