package pgjson

import (
	"strconv"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
)

// Version is source.version in every envelope.
const Version = "tidemark-1"

// SourceHead returns `"source":{"version":..,"connector":"tidemark","name":..,"db":..,
// "schema":..,"table":..,"lsn":`, the part of the source block that depends only on the table.
func SourceHead(prefix, database string, e change.ExportID) []byte {
	var h []byte
	h = append(h, `"source":{"version":"`+Version+`","connector":"tidemark","name":`...)
	h = AppendString(h, []byte(prefix))
	h = append(h, `,"db":`...)
	h = AppendString(h, []byte(database))
	h = append(h, `,"schema":`...)
	h = AppendString(h, []byte(e.Schema))
	h = append(h, `,"table":`...)
	h = AppendString(h, []byte(e.Table))
	return append(h, `,"lsn":`...)
}

// AppendTail appends what follows before and after in the envelope: the source block (head is
// SourceHead's), op and ts_ms. With snapshotText, source.snapshot is the string "true" or
// "false" (Debezium's enum in json-with-schema), else a JSON boolean.
func AppendTail(dst, head []byte, ch *format.Change, snapshotText bool) []byte {
	src := &ch.Source
	dst = append(dst, ',')
	dst = append(dst, head...)
	dst = strconv.AppendUint(dst, uint64(src.LSN), 10)
	dst = append(dst, `,"lsn_text":"`...)
	dst = format.AppendLSN(dst, src.LSN)
	dst = append(dst, `","txId":`...)
	dst = strconv.AppendUint(dst, uint64(src.Xid), 10)
	dst = append(dst, `,"sequence":`...)
	dst = strconv.AppendInt(dst, src.Seq, 10)
	switch {
	case src.Snapshot && snapshotText:
		dst = append(dst, `,"snapshot":"true","attempt":`...)
		dst = strconv.AppendInt(dst, int64(src.Attempt), 10)
	case src.Snapshot:
		dst = append(dst, `,"snapshot":true,"attempt":`...)
		dst = strconv.AppendInt(dst, int64(src.Attempt), 10)
	case snapshotText:
		dst = append(dst, `,"snapshot":"false"`...)
	default:
		dst = append(dst, `,"snapshot":false`...)
	}
	dst = append(dst, `,"ts_ms":`...)
	dst = strconv.AppendInt(dst, src.TsMs, 10)
	dst = append(dst, `},"op":"`...)
	dst = append(dst, byte(ch.Op))
	dst = append(dst, `","ts_ms":`...)
	dst = strconv.AppendInt(dst, ch.TsMs, 10)
	return append(dst, '}')
}

// IsString reports whether n's Connect type is string.
func (n *Node) IsString() bool { return n.typ == "string" }

// Shape returns the dimension decoration of the last top-level array AppendConnect wrote whose
// shape is not one dimension starting at 1 ("[0:2]"), or nil; ResetShape clears it.
func (c *Converter) Shape() []byte { return c.shape }

// ResetShape clears Shape before a column's value is converted.
func (c *Converter) ResetShape() { c.shape = c.shape[:0] }
