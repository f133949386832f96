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
		name string
		msg  []byte
	}{
		{"empty", nil},
		{"truncated relation", []byte{'R', 0, 0, 0, 1, 'p', 0, 't', 0, 'd', 0, 5}},
		{"truncated begin", []byte{'B', 0, 0}},
		{"logical message longer than itself", append([]byte{'M', 0, 0, 0, 0, 0, 0, 0, 0, 0, 'p', 0}, 0x7f, 0xff, 0xff, 0xff)},
		{"a row change (read in place instead)", insert(1, "1", "x")[25:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if msg, err := parseMessage(tc.msg); err == nil {
				t.Fatalf("parsed as %T, want an error", msg)
			}
		})
	}
	// Row changes: every length is checked before anything is read or allocated.
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"insert shorter than its header", []byte{'I', 0, 0}},
		{"insert column of 4 GiB", hugeColumn},
		{"insert without column count", insertHead},
		{"insert with fewer columns than counted", binary.BigEndian.AppendUint16(append([]byte{}, insertHead...), 3)},
		{"update new tuple longer than the message", update},
		{"delete with unknown tuple kind", []byte{'D', 0, 0, 0, 1, 'X', 0, 0}},
		{"column of unknown kind", append(binary.BigEndian.AppendUint16(append([]byte{}, insertHead...), 1), 'z')},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := newTestStream(t, 0)
			handled, err := st.fastChange(tc.msg)
			if !handled || !errors.Is(err, errTuple) {
				t.Fatalf("fastChange = %v, %v; want handled with an errTuple", handled, err)
			}
		})
	}
	// Well-formed messages pass.
	if _, err := parseMessage(relationMsg(1, "public", "a")[25:]); err != nil {
		t.Errorf("parseMessage(relation): %v", err)
	}
	st, out := newTestStream(t, 0)
	feed(t, st, begin(0x100, 7), insert(1, "1", "x"), commit(0x100, 0x108))
	if us := drain(out); len(us) != 1 || len(us[0].Records) != 1 || afterID(t, us[0].Records[0]) != "1" {
		t.Errorf("a well-formed insert gave %d units", len(us))
	}
}
