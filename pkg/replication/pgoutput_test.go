package replication

import (
	"encoding/binary"
	"errors"
	"testing"
)

func TestParseMessageMalformed(t *testing.T) {
	insertHead := []byte{'I', 0, 0, 0, 1, 'N'}
	hugeColumn := binary.BigEndian.AppendUint16(append([]byte{}, insertHead...), 1)
	hugeColumn = append(hugeColumn, 't', 0xff, 0xff, 0xff, 0xff, 'x')
	update := append([]byte{'U', 0, 0, 0, 1, 'O', 0, 1, 'n', 'N', 0, 1}, 't', 0, 0, 0, 9, 'x')
	for _, tc := range []struct {
		name  string
		msg   []byte
		tuple bool // rejected by checkTuples, before pglogrepl allocates
	}{
		{"empty", nil, false},
		{"truncated relation", []byte{'R', 0, 0, 0, 1, 'p', 0, 't', 0, 'd', 0, 5}, false},
		{"truncated begin", []byte{'B', 0, 0}, false},
		{"logical message longer than itself", append([]byte{'M', 0, 0, 0, 0, 0, 0, 0, 0, 0, 'p', 0}, 0x7f, 0xff, 0xff, 0xff), false},
		{"insert column of 4 GiB", hugeColumn, true},
		{"insert without column count", insertHead, true},
		{"insert with fewer columns than counted", binary.BigEndian.AppendUint16(append([]byte{}, insertHead...), 3), true},
		{"update new tuple longer than the message", update, true},
		{"delete with unknown tuple kind", []byte{'D', 0, 0, 0, 1, 'X', 0, 0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := parseMessage(tc.msg)
			if err == nil {
				t.Fatalf("parsed as %T, want an error", msg)
			}
			if got := errors.Is(err, errTuple); got != tc.tuple {
				t.Fatalf("error %v: errTuple %v, want %v", err, got, tc.tuple)
			}
		})
	}
	// Well-formed messages pass the check.
	for _, m := range [][]byte{insert(1, "1", "x")[25:], relationMsg(1, "public", "a")[25:]} {
		if _, err := parseMessage(m); err != nil {
			t.Errorf("parseMessage(%q): %v", m, err)
		}
	}
}
