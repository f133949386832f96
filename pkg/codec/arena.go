package codec

import (
	"fmt"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/format"
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

// encode has the format write ch's record (value, key, the format's header) straight into the
// free end of the arena, with room for twice the last record, or into e.val when the last
// record was too large to share a chunk (large). Nothing is kept until keep.
func (e *Encoder) encode(ch *format.Change) (enc format.Encoded, large bool, err error) {
	large = e.lastLen > arenaLarge/2
	buf := e.val[:0]
	if !large {
		buf = e.arena.Tail(2*e.lastLen + 256)
	}
	enc, err = e.enc.Encode(buf, ch)
	if large {
		e.val = enc.Buf
	}
	return enc, large, err
}

// keep keeps the record encode wrote, and returns its key (nil for a keyless table) and value
// as capacity-limited slices of the arena; e.lastHdr becomes its format header. A value longer
// than Config.MaxRecordBytes is refused (ErrRecordTooLarge) and nothing is kept.
func (e *Encoder) keep(enc format.Encoded, large bool) (key, value []byte, err error) {
	if e.cfg.MaxRecordBytes > 0 && enc.Value > e.cfg.MaxRecordBytes {
		return nil, nil, fmt.Errorf("change (op %c) of %s at %s: %w: %d bytes encoded, the limit is %d",
			e.ch.Op, e.table.Export, e.ch.Source.LSN, ErrRecordTooLarge, enc.Value, e.cfg.MaxRecordBytes)
	}
	v, k, h := enc.Value, enc.Value+enc.Key, enc.Value+enc.Key+enc.HeaderLen
	e.lastLen = v
	e.lastHdr = change.Header{}
	if large {
		// Each part on its own: the value may take an allocation of its own, the rest not.
		value = e.own(enc.Buf[:v])
		if enc.Key > 0 {
			key = e.own(enc.Buf[v:k])
		}
		if enc.HeaderLen > 0 {
			e.lastHdr = change.Header{Key: enc.HeaderKey, Value: e.own(enc.Buf[k:h])}
		}
		return key, value, nil
	}
	// A record that outgrew the tail was appended into a new allocation; Keep copies it.
	b := e.arena.Keep(enc.Buf)
	value = b[:v:v]
	if enc.Key > 0 {
		key = b[v:k:k]
	}
	if enc.HeaderLen > 0 {
		e.lastHdr = change.Header{Key: enc.HeaderKey, Value: b[k:h:h]}
	}
	return key, value, nil
}

// encodeKept is encode and keep.
func (e *Encoder) encodeKept(ch *format.Change) (key, value []byte, err error) {
	enc, large, err := e.encode(ch)
	if err != nil {
		return nil, nil, err
	}
	return e.keep(enc, large)
}

// lsnText returns the "X/Y" rendering of l in the arena.
func (e *Encoder) lsnText(l change.LSN) []byte {
	var buf [17]byte
	return e.own(format.AppendLSN(buf[:0], l))
}

// headers returns the header slice of one record: the LSN and op, plus the old and new key and
// the unchanged columns when given, and the format's own header of the last record kept.
func (e *Encoder) headers(lsn []byte, op change.Op, oldKey, newKey, unchanged []byte) []change.Header {
	n := 2
	if oldKey != nil {
		n += 2
	}
	if unchanged != nil {
		n++
	}
	if e.lastHdr.Key != "" {
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
	if e.lastHdr.Key != "" {
		e.hdrs = append(e.hdrs, e.lastHdr)
	}
	return e.hdrs[s:len(e.hdrs):len(e.hdrs)]
}
