package pgjson

import (
	"fmt"
	"strconv"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
	"github.com/tidemark/cdc/pkg/format/jsonscan"
)

// DecodeEnvelope reads a Debezium envelope (the plain JSON value, or json-with-schema's
// payload) into r. It scans the JSON once and keeps before and after as slices of env (no
// copy); only the source block's fields are parsed.
func DecodeEnvelope(r *format.Record, env []byte) error {
	var f envelopeFields
	if !f.scan(env) {
		return envelopeError("value is not a JSON object")
	}
	op := f.op
	if len(op) != 3 || op[0] != '"' || op[2] != '"' {
		return envelopeError("no op")
	}
	r.Op = change.Op(op[1])
	switch r.Op {
	case change.OpRead, change.OpCreate, change.OpUpdate, change.OpDelete, change.OpTruncate:
	default:
		return envelopeError("unknown op " + string(op))
	}
	r.Before, r.After = jsonscan.Nullable(f.before), jsonscan.Nullable(f.after)
	var src sourceFields
	if !src.scan(f.source) {
		return envelopeError("no source")
	}
	lsn, err := strconv.ParseUint(jsonscan.UnsafeString(src.lsn), 10, 64)
	if err != nil {
		return envelopeError("source.lsn is not a number")
	}
	s := &r.Source
	s.LSN = change.LSN(lsn)
	if v := src.txID; v != nil {
		x, err := strconv.ParseUint(jsonscan.UnsafeString(v), 10, 32)
		if err != nil {
			return envelopeError("source.txId is not a number")
		}
		s.TxID = uint32(x)
	}
	if v := src.sequence; v != nil {
		if s.Sequence, err = strconv.ParseInt(jsonscan.UnsafeString(v), 10, 64); err != nil {
			return envelopeError("source.sequence is not a number")
		}
	}
	if v := src.tsMs; v != nil {
		s.TsMs, _ = strconv.ParseInt(jsonscan.UnsafeString(v), 10, 64)
	}
	if v := src.attempt; v != nil {
		s.Attempt, _ = strconv.Atoi(jsonscan.UnsafeString(v))
	}
	snap := src.snapshot
	s.Snapshot = string(snap) == "true" || string(snap) == `"true"` || r.Op == change.OpRead
	s.DB, s.Schema, s.Table = jsonscan.String(src.db), jsonscan.String(src.schema), jsonscan.String(src.table)
	return nil
}

func envelopeError(msg string) error { return fmt.Errorf("%w: %s", format.ErrEnvelope, msg) }

// envelopeFields are the fields of an envelope.
type envelopeFields struct {
	before, after, source, op []byte
}

func (f *envelopeFields) scan(b []byte) bool {
	return jsonscan.EachField(b, func(name string, v []byte) {
		switch name {
		case "before":
			f.before = v
		case "after":
			f.after = v
		case "source":
			f.source = v
		case "op":
			f.op = v
		}
	})
}

// sourceFields are the fields of the source block a consumer uses.
type sourceFields struct {
	lsn, txID, sequence, tsMs, attempt, snapshot, db, schema, table []byte
}

func (f *sourceFields) scan(b []byte) bool {
	return jsonscan.EachField(b, func(name string, v []byte) {
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
