package codec

import (
	"github.com/tidemark/cdc/pkg/change"
)

// Records outlive the call that made them (they wait in the sink until Kafka acknowledges them),
// so their bytes cannot live in the encoder's reusable buffers. Instead of one allocation per key,
// value and header slice, the encoder copies them into the chunks of a slab (the arena), which
// hands out capacity-limited sub-slices: appending to one of them reallocates instead of
// overwriting a neighbour.
const (
	arenaChunk  = 32 << 10 // bytes per chunk
	arenaLarge  = 4 << 10  // values larger than this get their own allocation
	headerChunk = 256      // headers per chunk
)

// own copies b into the arena and returns the copy.
func (e *Encoder) own(b []byte) []byte { return e.arena.Copy(b) }

// arenaTail returns the free end of the arena as an empty slice to append a value to, with
// room for twice the last value: a value written there and kept with commitTail is not copied
// again. (A value that outgrows the room is appended into a new allocation by append, and
// commitTail copies it as own does.)
func (e *Encoder) arenaTail() []byte { return e.arena.Tail(2*e.lastVal + 256) }

// commitTail keeps val, appended to the slice arenaTail returned, in the arena, and returns it
// with its capacity limited as own does.
func (e *Encoder) commitTail(val []byte) []byte { return e.arena.Keep(val) }

// lsnText returns the "X/Y" rendering of l in the arena.
func (e *Encoder) lsnText(l change.LSN) []byte {
	var buf [17]byte
	return e.own(appendLSN(buf[:0], l))
}

// headers returns the header slice of one record: the LSN and op, plus the old and new key and
// the unchanged columns when given.
func (e *Encoder) headers(lsn []byte, op change.Op, oldKey, newKey, unchanged []byte) []change.Header {
	n := 2
	if oldKey != nil {
		n += 2
	}
	if unchanged != nil {
		n++
	}
	if len(e.dims) > 0 {
		n++
	}
	if cap(e.hdrs)-len(e.hdrs) < n {
		e.hdrs = make([]change.Header, 0, headerChunk)
	}
	s := len(e.hdrs)
	e.hdrs = append(e.hdrs,
		change.Header{Key: HeaderLSN, Value: lsn},
		change.Header{Key: HeaderOp, Value: e.own([]byte{byte(op)})},
	)
	if oldKey != nil {
		e.hdrs = append(e.hdrs,
			change.Header{Key: HeaderOldKey, Value: oldKey},
			change.Header{Key: HeaderNewKey, Value: newKey},
		)
	}
	if unchanged != nil {
		e.hdrs = append(e.hdrs, change.Header{Key: HeaderUnchanged, Value: unchanged})
	}
	if len(e.dims) > 0 {
		e.hdrs = append(e.hdrs, change.Header{Key: HeaderArrayDims, Value: e.own(e.dims)})
	}
	return e.hdrs[s:len(e.hdrs):len(e.hdrs)]
}

// appendLSN appends l as PostgreSQL prints it: "X/Y", upper-case hex without leading zeros.
func appendLSN(dst []byte, l change.LSN) []byte {
	dst = appendHexUpper(dst, uint32(l>>32))
	dst = append(dst, '/')
	return appendHexUpper(dst, uint32(l))
}

func appendHexUpper(dst []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	var buf [8]byte
	i := len(buf)
	for {
		i--
		buf[i] = digits[v&0xf]
		v >>= 4
		if v == 0 {
			break
		}
	}
	return append(dst, buf[i:]...)
}
