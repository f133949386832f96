package avro

import (
	"encoding/binary"
	"math"
)

// Avro's binary encoding of the primitive types (the specification's "Binary Encoding").

// appendLong appends v as Avro's long (and int): zig-zag, then a base-128 varint.
func appendLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1^v>>63))
}

// appendBytes appends b as Avro's bytes (and string): its length, then the bytes.
func appendBytes(dst, b []byte) []byte {
	dst = appendLong(dst, int64(len(b)))
	return append(dst, b...)
}

func appendFloat(dst []byte, f float32) []byte {
	return binary.LittleEndian.AppendUint32(dst, math.Float32bits(f))
}

func appendDouble(dst []byte, f float64) []byte {
	return binary.LittleEndian.AppendUint64(dst, math.Float64bits(f))
}

func appendBool(dst []byte, b bool) []byte {
	if b {
		return append(dst, 1)
	}
	return append(dst, 0)
}

// Union branches of an optional field ["null", T]: the zig-zag longs 0 and 1.
const (
	unionNull  = 0
	unionValue = 2
)

// readLong reads an Avro long at the start of b; n is 0 when b does not hold one.
func readLong(b []byte) (v int64, n int) {
	u, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0
	}
	return int64(u>>1) ^ -int64(u&1), n
}
