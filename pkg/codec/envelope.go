package codec

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tidemark/cdc/pkg/change"
)

// The JSON writers of an Encoder: key, envelope, row and source block.

// appendKey appends the key object of row.
func (e *Encoder) appendKey(dst []byte, row [][]byte, unavail []bool) ([]byte, error) {
	dst = append(dst, e.keyHead...)
	dst = append(dst, '{')
	for i, c := range e.keyIdx {
		if unavail != nil && unavail[c] {
			return dst, e.unknownKey(c)
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, e.cols[c].name...)
		var err error
		if dst, err = e.appendColumn(dst, c, row, nil); err != nil {
			return dst, err
		}
	}
	if e.keyHead != nil {
		dst = append(dst, '}')
	}
	return append(dst, '}'), nil
}

// appendColumn appends the JSON value of column i of row.
func (e *Encoder) appendColumn(dst []byte, i int, row [][]byte, unavail []bool) ([]byte, error) {
	c := &e.cols[i]
	if c.node != nil {
		return e.appendConnectColumn(dst, i, row, unavail)
	}
	if unavail != nil && unavail[i] {
		return append(dst, e.placeholder...), nil
	}
	out, err := appendValue(dst, c.kind, c.oid, row[i], &e.scratch)
	if err != nil {
		return dst, &ValueError{Column: e.table.Columns[i].Name, Export: e.table.Export, Err: err}
	}
	return out, nil
}

// appendEnvelope appends the Debezium envelope.
func (e *Encoder) appendEnvelope(dst []byte, src Source, op change.Op, before, after [][]byte, unavail []bool) ([]byte, error) {
	var err error
	e.dims, e.dimsSec = e.dims[:0], false
	dst = append(dst, e.valHead...)
	dst = append(dst, '{')
	if dst, err = e.appendSection(dst, `"before"`, before, nil); err != nil {
		return dst, err
	}
	dst = append(dst, ',')
	if dst, err = e.appendSection(dst, `"after"`, after, unavail); err != nil {
		return dst, err
	}
	if len(e.dims) > 0 {
		e.dims = append(e.dims, '}')
	}
	dst = e.appendTail(dst, src, op)
	if e.valHead != nil {
		dst = append(dst, '}')
	}
	if e.cfg.MaxRecordBytes > 0 && len(dst) > e.cfg.MaxRecordBytes {
		return dst, fmt.Errorf("change (op %c) of %s at %s: %w: %d bytes encoded, the limit is %d",
			op, e.table.Export, src.LSN, ErrRecordTooLarge, len(dst), e.cfg.MaxRecordBytes)
	}
	return dst, nil
}

// appendSection appends one side of the envelope: name (`"before"` or `"after"`) and row, or
// null when there is no row. While row is encoded, e.section names the side for HeaderArrayDims.
func (e *Encoder) appendSection(dst []byte, name string, row [][]byte, unavail []bool) ([]byte, error) {
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
	e.closeDims()
	return dst, nil
}

// appendTail appends what follows before and after: the source block, op and ts_ms.
func (e *Encoder) appendTail(dst []byte, src Source, op change.Op) []byte {
	dst = append(dst, ',')
	dst = append(dst, e.srcHead...)
	dst = strconv.AppendUint(dst, uint64(src.LSN), 10)
	dst = append(dst, `,"lsn_text":"`...)
	dst = appendLSN(dst, src.LSN)
	dst = append(dst, `","txId":`...)
	dst = strconv.AppendUint(dst, uint64(src.Xid), 10)
	dst = append(dst, `,"sequence":`...)
	dst = strconv.AppendInt(dst, src.Seq, 10)
	switch {
	case src.Snapshot && e.valHead != nil:
		dst = append(dst, `,"snapshot":"true","attempt":`...)
		dst = strconv.AppendInt(dst, int64(src.Attempt), 10)
	case src.Snapshot:
		dst = append(dst, `,"snapshot":true,"attempt":`...)
		dst = strconv.AppendInt(dst, int64(src.Attempt), 10)
	case e.valHead != nil:
		dst = append(dst, `,"snapshot":"false"`...)
	default:
		dst = append(dst, `,"snapshot":false`...)
	}
	dst = append(dst, `,"ts_ms":`...)
	dst = strconv.AppendInt(dst, unixMilli(src.Time), 10)
	dst = append(dst, `},"op":"`...)
	dst = append(dst, byte(op))
	dst = append(dst, `","ts_ms":`...)
	dst = strconv.AppendInt(dst, unixMilli(e.now()), 10)
	return append(dst, '}')
}

func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// appendRow appends a row as a JSON object and records each value's span in e.spans.
func (e *Encoder) appendRow(dst []byte, row [][]byte, unavail []bool) ([]byte, error) {
	if cap(e.spans) < 2*len(e.cols) {
		e.spans = make([]int, 2*len(e.cols))
	}
	e.spans = e.spans[:2*len(e.cols)]
	dst = append(dst, '{')
	omit := unavail != nil && e.cfg.Unchanged != UnchangedPlaceholder
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
