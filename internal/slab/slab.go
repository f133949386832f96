// Package slab copies small byte slices into shared chunks: one allocation per chunk instead of
// one per slice, for bytes that outlive the buffer they were read or built in (replication
// messages waiting for the stream goroutine, records waiting in the sink for Kafka). Every slice
// it hands out has its capacity limited to its length, so appending to one reallocates instead
// of overwriting a neighbour. A chunk is freed once no slice in it is referenced.
package slab

// Slab hands out slices from its current chunk and starts a new one when that is full. Make it
// with New; it is not safe for concurrent use.
type Slab struct {
	buf   []byte
	chunk int // bytes per chunk
	large int // a slice longer than this gets its own allocation
}

// New returns a slab of chunks of chunk bytes in which slices of more than large bytes get
// their own allocation.
func New(chunk, large int) Slab { return Slab{chunk: chunk, large: large} }

// Copy returns a copy of b.
func (s *Slab) Copy(b []byte) []byte {
	if len(b) > s.large {
		return append(make([]byte, 0, len(b)), b...)
	}
	if cap(s.buf)-len(s.buf) < len(b) {
		s.buf = make([]byte, 0, s.chunk)
	}
	n := len(s.buf)
	s.buf = append(s.buf, b...)
	return s.buf[n:len(s.buf):len(s.buf)]
}

// Tail returns the free end of the current chunk as an empty slice to append a value to,
// starting a new chunk when less than room bytes are free. Keep then keeps the value in the
// chunk without copying it.
func (s *Slab) Tail(room int) []byte {
	if cap(s.buf)-len(s.buf) < room {
		s.buf = make([]byte, 0, max(s.chunk, room))
	}
	n := len(s.buf)
	return s.buf[n:n]
}

// Keep keeps val, appended to the slice Tail returned, in the chunk and returns it with its
// capacity limited as Copy does. A val that outgrew the free end (append moved it to an
// allocation of its own) is copied as Copy does.
func (s *Slab) Keep(val []byte) []byte {
	n := len(s.buf)
	if len(val) == 0 || cap(val) != cap(s.buf)-n || &val[0] != &s.buf[n : n+1][0] {
		return s.Copy(val)
	}
	s.buf = s.buf[:n+len(val)]
	return s.buf[n:len(s.buf):len(s.buf)]
}
