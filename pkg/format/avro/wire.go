package avro

import (
	"encoding/binary"
	"fmt"

	"github.com/tidemark/cdc/pkg/schemareg"
)

// Confluent's wire format: a magic byte 0, the schema's registry id in 4 big-endian bytes, then
// the Avro binary encoding of the datum.

const (
	magic      = 0
	headerSize = 5
)

// appendHeader appends the 5-byte header of a datum written with schema id.
func appendHeader(dst []byte, id schemareg.ID) []byte {
	dst = append(dst, magic)
	return binary.BigEndian.AppendUint32(dst, uint32(id))
}

// splitHeader returns the schema id and the datum of a framed record.
func splitHeader(b []byte) (schemareg.ID, []byte, error) {
	if len(b) < headerSize || b[0] != magic {
		return 0, nil, fmt.Errorf("not Confluent's Avro wire format (magic byte 0 and a 4-byte schema id)")
	}
	return schemareg.ID(binary.BigEndian.Uint32(b[1:headerSize])), b[headerSize:], nil
}
