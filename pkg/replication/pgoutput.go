package replication

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// parseMessage is pglogrepl.Parse made safe for any input (FuzzDecode found both problems):
// pglogrepl indexes past the end of a truncated message, and allocates a tuple column's declared
// length before checking that the message holds it, so four corrupt bytes could ask for 4 GiB.
// Here a malformed message is an error, never a panic or a huge allocation.
func parseMessage(data []byte) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, errors.New("empty message")
	}
	if err := checkTuples(data); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("malformed %q message of %d bytes", data[0], len(data))
		}
	}()
	return pglogrepl.Parse(data)
}

// errTuple is wrapped by checkTuples' errors.
var errTuple = errors.New("malformed tuple")

// checkTuples checks that every column value of an Insert, Update or Delete message (protocol
// version 1) lies inside the message. Other messages pass. It reads only the headers and
// allocates nothing.
func checkTuples(data []byte) error {
	var tuples int // tuples the message carries at most
	switch data[0] {
	case 'I', 'D':
		tuples = 1
	case 'U':
		tuples = 2
	default:
		return nil
	}
	pos := 1 + 4 // type, relation OID
	for range tuples {
		if pos >= len(data) {
			break
		}
		switch data[pos] { // 'N' new, 'K' key or 'O' old tuple
		case 'N', 'K', 'O':
		default:
			return fmt.Errorf("%q message: %w: unknown tuple kind %q", data[0], errTuple, data[pos])
		}
		end, err := tupleEnd(data, pos+1)
		if err != nil {
			return fmt.Errorf("%q message: %w", data[0], err)
		}
		pos = end
	}
	return nil
}

// tupleEnd returns the offset just after the TupleData that starts at pos.
func tupleEnd(data []byte, pos int) (int, error) {
	if pos+2 > len(data) {
		return 0, fmt.Errorf("%w: truncated column count", errTuple)
	}
	n := int(binary.BigEndian.Uint16(data[pos:]))
	pos += 2
	for i := range n {
		if pos >= len(data) {
			return 0, fmt.Errorf("%w: %d of %d columns", errTuple, i, n)
		}
		kind := data[pos]
		pos++
		if kind != pglogrepl.TupleDataTypeText && kind != pglogrepl.TupleDataTypeBinary {
			continue
		}
		if pos+4 > len(data) {
			return 0, fmt.Errorf("%w: truncated length of column %d", errTuple, i+1)
		}
		l := uint64(binary.BigEndian.Uint32(data[pos:]))
		pos += 4
		if l > uint64(len(data)-pos) {
			return 0, fmt.Errorf("%w: column %d of %d bytes, %d left in the message", errTuple, i+1, l, len(data)-pos)
		}
		pos += int(l)
	}
	return pos, nil
}
