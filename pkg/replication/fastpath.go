package replication

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// The row changes (Insert, Update, Delete) are most of a stream, so they skip pglogrepl's
// parser, which allocates a message, a column struct and a copy of every value: their tuples
// are read in place into buffers the stream state reuses, and encoded before the next message
// arrives (the encoder copies the values). Every length is checked against the message first,
// so a corrupt one is an error (errTuple), never a panic or a large allocation. Every other
// message goes through parseMessage. BenchmarkDecodeTxn measures the difference; FuzzDecode
// feeds this code arbitrary bytes.

// errTuple is wrapped by the errors of a malformed row change.
var errTuple = errors.New("malformed tuple")

// isRowChange reports whether a pgoutput message type is Insert, Update or Delete.
func isRowChange(kind byte) bool { return kind == 'I' || kind == 'U' || kind == 'D' }

// rowBuffers are the reusable tuple buffers of the row-change fast path.
type rowBuffers struct {
	before, after [][]byte
	hasBefore     bool
	unchanged     []bool
	hasUnchanged  bool
	// Encode functions bound once (a method value made per change would allocate).
	insertFn, updateFn, deleteFn encodeFunc
}

// fastChange handles data if it is an Insert, Update or Delete message (protocol version 1),
// reading its tuples in place. handled is false for any other message. A message a worker has
// encoded already (st.pre, encoders.go) is not read again: its records are taken as they are.
func (st *streamState) fastChange(data []byte) (handled bool, err error) {
	if len(data) == 0 || !isRowChange(data[0]) {
		return false, nil
	}
	if st.pre != nil {
		if st.preFn == nil {
			st.preFn = st.takePre // bound once: a method value made per change would allocate
		}
		return true, st.change(binary.BigEndian.Uint32(data[1:]), st.preFn)
	}
	relID, fn, err := st.rows.parse(data)
	if err != nil {
		return true, err
	}
	return true, st.change(relID, fn)
}

// parse reads the tuples of the row change data (Insert, Update or Delete) into rb and returns
// its relation and the function that encodes it from rb.
func (rb *rowBuffers) parse(data []byte) (relID uint32, fn encodeFunc, err error) {
	kind := data[0]
	if len(data) < 6 {
		return 0, nil, fmt.Errorf("parse pgoutput message: %q message: %w: %d bytes", kind, errTuple, len(data))
	}
	if rb.insertFn == nil {
		rb.insertFn, rb.updateFn, rb.deleteFn = rb.encodeInsert, rb.encodeUpdate, rb.encodeDelete
	}
	relID = binary.BigEndian.Uint32(data[1:])
	pos := 5
	rb.hasBefore, rb.hasUnchanged = false, false
	switch kind {
	case 'I':
		if data[pos] != 'N' {
			return 0, nil, fmt.Errorf("parse pgoutput message: insert: %w: tuple kind %q", errTuple, data[pos])
		}
		if rb.after, _, _, err = readTuple(data, pos+1, rb.after[:0], nil); err != nil {
			return 0, nil, fmt.Errorf("parse pgoutput message: insert: %w", err)
		}
		return relID, rb.insertFn, nil
	case 'U':
		if data[pos] == 'K' || data[pos] == 'O' {
			if rb.before, _, pos, err = readTuple(data, pos+1, rb.before[:0], nil); err != nil {
				return 0, nil, fmt.Errorf("parse pgoutput message: update: %w", err)
			}
			rb.hasBefore = true
		}
		if pos >= len(data) || data[pos] != 'N' {
			return 0, nil, fmt.Errorf("parse pgoutput message: update: %w: no new tuple", errTuple)
		}
		if rb.after, rb.hasUnchanged, _, err = readTuple(data, pos+1, rb.after[:0], &rb.unchanged); err != nil {
			return 0, nil, fmt.Errorf("parse pgoutput message: update: %w", err)
		}
		return relID, rb.updateFn, nil
	default: // 'D'
		if data[pos] != 'K' && data[pos] != 'O' {
			return 0, nil, fmt.Errorf("parse pgoutput message: delete: %w: tuple kind %q", errTuple, data[pos])
		}
		if rb.before, _, _, err = readTuple(data, pos+1, rb.before[:0], nil); err != nil {
			return 0, nil, fmt.Errorf("parse pgoutput message: delete: %w", err)
		}
		rb.hasBefore = true
		return relID, rb.deleteFn, nil
	}
}

// readTuple reads the TupleData at data[pos:] into vals (nil for NULL; the others slice data,
// an empty value a non-nil empty slice). With unchanged set it marks the unchanged out-of-line
// columns there (reusing its buffer) and reports whether there were any. It returns the offset
// after the tuple.
func readTuple(data []byte, pos int, vals [][]byte, unchanged *[]bool) ([][]byte, bool, int, error) {
	if pos+2 > len(data) {
		return vals, false, 0, fmt.Errorf("%w: truncated column count", errTuple)
	}
	n := int(binary.BigEndian.Uint16(data[pos:]))
	pos += 2
	if n > len(data)-pos {
		// Every column takes at least its kind byte.
		return vals, false, 0, fmt.Errorf("%w: %d columns in the %d bytes left", errTuple, n, len(data)-pos)
	}
	any := false
	if unchanged != nil {
		*unchanged = (*unchanged)[:0]
	}
	for i := range n {
		if pos >= len(data) {
			return vals, false, 0, fmt.Errorf("%w: %d of %d columns", errTuple, i, n)
		}
		var v []byte
		u := false
		switch data[pos] {
		case 'n':
			pos++
		case 'u':
			pos++
			u, any = true, true
		case 't', 'b':
			if pos+5 > len(data) {
				return vals, false, 0, fmt.Errorf("%w: truncated length of column %d", errTuple, i+1)
			}
			l := int(binary.BigEndian.Uint32(data[pos+1:]))
			pos += 5
			if l < 0 || l > len(data)-pos {
				return vals, false, 0, fmt.Errorf("%w: column %d of %d bytes in a message of %d", errTuple, i+1, l, len(data))
			}
			v = data[pos : pos+l : pos+l]
			pos += l
		default:
			return vals, false, 0, fmt.Errorf("%w: unknown column kind %q", errTuple, data[pos])
		}
		vals = append(vals, v)
		if unchanged != nil {
			*unchanged = append(*unchanged, u)
		}
	}
	return vals, any, pos, nil
}

// checkColumns checks that a tuple has the relation's column count.
func checkColumns(vals [][]byte, ncols int) error {
	if len(vals) != ncols {
		return fmt.Errorf("tuple has %d columns, relation has %d", len(vals), ncols)
	}
	return nil
}

func (rb *rowBuffers) encodeInsert(enc *codec.Encoder, dst []change.Record, src codec.Source, n int) ([]change.Record, error) {
	if err := checkColumns(rb.after, n); err != nil {
		return dst, err
	}
	return enc.Insert(dst, src, rb.after)
}

func (rb *rowBuffers) encodeUpdate(enc *codec.Encoder, dst []change.Record, src codec.Source, n int) ([]change.Record, error) {
	var before [][]byte
	if rb.hasBefore {
		if err := checkColumns(rb.before, n); err != nil {
			return dst, err
		}
		before = rb.before
	}
	if err := checkColumns(rb.after, n); err != nil {
		return dst, err
	}
	var unchanged []bool
	if rb.hasUnchanged {
		unchanged = rb.unchanged
	}
	return enc.Update(dst, src, before, rb.after, unchanged)
}

func (rb *rowBuffers) encodeDelete(enc *codec.Encoder, dst []change.Record, src codec.Source, n int) ([]change.Record, error) {
	if err := checkColumns(rb.before, n); err != nil {
		return dst, err
	}
	return enc.Delete(dst, src, rb.before)
}
