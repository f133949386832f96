package replication

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// Hostile or corrupt input. pglogrepl's decoders trust the message: TruncateMessage.Decode
// sizes a slice from the relation count before checking that the message holds it (a 10-byte
// Truncate asks for 16 GiB, and an allocation that fails is a fatal error no recover catches),
// RelationMessage and LogicalDecodingMessage index past the end of a short message, and a tuple
// column's declared length is allocated before it is checked. So every message is walked by
// checkMessage first: every count and length is checked against the bytes that remain, without
// allocating anything, and only a message that holds everything it declares reaches pglogrepl.
// Row changes (Insert, Update, Delete) never reach pglogrepl: fastChange reads their tuples in
// place with the same checks. The wrappers are safe in pglogrepl (ParseXLogData checks its 24
// header bytes and slices the rest, ParsePrimaryKeepaliveMessage wants exactly 17 bytes), and
// pgproto3 refuses a wire message above PostgreSQL's own limit (1 GiB) before reading it.

// errMalformed is wrapped by the errors of a message that does not hold what it declares.
var errMalformed = errors.New("malformed message")

// errDecoderPanic is wrapped when pglogrepl panicked on a message checkMessage accepted: a bug
// in checkMessage (FuzzDecode fails on it), turned into an error rather than a crash.
var errDecoderPanic = errors.New("pgoutput decoder panicked")

// parseMessage decodes a pgoutput message other than a row change (those are read by
// fastChange). A malformed message is an error, never a panic or an allocation larger than the
// message.
func parseMessage(data []byte) (msg pglogrepl.Message, err error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", errMalformed)
	}
	if isRowChange(data[0]) {
		return nil, fmt.Errorf("%q message: row changes are read by fastChange", data[0])
	}
	if err := checkMessage(data); err != nil {
		return nil, err
	}
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("%w: %q message of %d bytes", errDecoderPanic, data[0], len(data))
		}
	}()
	return pglogrepl.Parse(data)
}

// checkMessage walks a pgoutput message (protocol version 1, the one the stage asks for) and
// checks that it holds every field, count and length it declares. It allocates nothing.
func checkMessage(data []byte) error {
	w := wire{b: data[1:]}
	kind := data[0]
	switch kind {
	case 'B': // Begin: final LSN, commit time, xid.
		w.skip(8+8+4, "begin")
	case 'C': // Commit: flags, commit LSN, end LSN, commit time.
		w.skip(1+8+8+8, "commit")
	case 'O': // Origin: commit LSN, name.
		w.skip(8, "origin LSN")
		w.cstring("origin name")
	case 'Y': // Type: OID, namespace, name.
		w.skip(4, "type OID")
		w.cstring("type namespace")
		w.cstring("type name")
	case 'R': // Relation: OID, namespace, name, replica identity, columns.
		w.skip(4, "relation OID")
		w.cstring("relation namespace")
		w.cstring("relation name")
		w.skip(1, "replica identity")
		// Each column takes at least flags, an empty name's NUL, a type OID and a modifier.
		n := w.count(uint64(w.u16("column count")), 1+1+4+4, "columns")
		for i := 0; i < n && w.err == nil; i++ {
			w.skip(1, "column flags")
			w.cstring("column name")
			w.skip(4+4, "column type")
		}
	case 'T': // Truncate: relation count, options, relation OIDs.
		n := w.u32("relation count")
		w.skip(1, "truncate options")
		w.skip(w.count(uint64(n), 4, "relation OIDs")*4, "relation OIDs")
	case 'M': // Message: flags, LSN, prefix, content.
		w.skip(1+8, "message header")
		w.cstring("message prefix")
		w.skip(w.count(uint64(w.u32("content length")), 1, "content bytes"), "content")
	case 'S', 'E', 'c', 'A':
		return fmt.Errorf("%w: %q is a message of in-progress transaction streaming, which the stage does not ask for", errMalformed, kind)
	default:
		return fmt.Errorf("%w: unknown message type %q", errMalformed, kind)
	}
	if w.err != nil {
		return fmt.Errorf("%w: %q message of %d bytes: %w", errMalformed, kind, len(data), w.err)
	}
	return nil
}

// wire reads a message front to back. The first field that does not fit sets err; later calls
// then do nothing.
type wire struct {
	b   []byte
	err error
}

func (w *wire) fail(format string, args ...any) {
	if w.err == nil {
		w.err = fmt.Errorf(format, args...)
	}
}

// take consumes n bytes and returns them, or returns nil (and sets err) when fewer are left.
func (w *wire) take(n int, field string) []byte {
	if w.err != nil {
		return nil
	}
	if n < 0 || n > len(w.b) {
		w.fail("%s needs %d bytes, %d left", field, n, len(w.b))
		return nil
	}
	b := w.b[:n]
	w.b = w.b[n:]
	return b
}

// skip consumes n bytes.
func (w *wire) skip(n int, field string) { w.take(n, field) }

func (w *wire) u16(field string) uint16 {
	if b := w.take(2, field); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (w *wire) u32(field string) uint32 {
	if b := w.take(4, field); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

// cstring consumes a NUL-terminated string.
func (w *wire) cstring(field string) {
	if w.err != nil {
		return
	}
	i := bytes.IndexByte(w.b, 0)
	if i < 0 {
		w.fail("%s: no terminating NUL in the %d bytes left", field, len(w.b))
		return
	}
	w.b = w.b[i+1:]
}

// count checks that n items of at least each bytes fit in what is left, and returns n.
func (w *wire) count(n uint64, each int, field string) int {
	if w.err != nil {
		return 0
	}
	if n > uint64(len(w.b))/uint64(each) {
		if each == 1 {
			w.fail("%d %s in the %d bytes left", n, field, len(w.b))
		} else {
			w.fail("%d %s of at least %d bytes each in the %d bytes left", n, field, each, len(w.b))
		}
		return 0
	}
	return int(n)
}
