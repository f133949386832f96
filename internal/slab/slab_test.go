package slab

import (
	"bytes"
	"testing"
	"unsafe"
)

func TestCopy(t *testing.T) {
	tests := []struct {
		name      string
		chunk     int
		large     int
		in        [][]byte
		wantShare bool // the first two copies share a chunk
	}{
		{name: "small slices share a chunk", chunk: 64, large: 16, in: [][]byte{[]byte("abc"), []byte("defg")}, wantShare: true},
		{name: "a large slice gets its own allocation", chunk: 64, large: 2, in: [][]byte{[]byte("abc"), []byte("de")}},
		{name: "a full chunk starts another", chunk: 4, large: 4, in: [][]byte{[]byte("abc"), []byte("de")}},
		{name: "empty slices", chunk: 8, large: 4, in: [][]byte{{}, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(tt.chunk, tt.large)
			var out [][]byte
			for _, b := range tt.in {
				c := s.Copy(b)
				if !bytes.Equal(c, b) {
					t.Fatalf("Copy(%q) = %q", b, c)
				}
				if cap(c) != len(c) {
					t.Fatalf("Copy(%q): cap %d, want %d", b, cap(c), len(c))
				}
				out = append(out, c)
			}
			if len(out[0]) > 0 && len(out[1]) > 0 {
				if shared := sameChunk(out[0], out[1]); shared != tt.wantShare {
					t.Fatalf("copies share a chunk: %v, want %v", shared, tt.wantShare)
				}
			}
			// Appending to a copy never reaches its neighbour.
			out[0] = append(out[0], 'X')
			if !bytes.Equal(out[1], tt.in[1]) {
				t.Fatalf("append to the first copy changed the second: %q, want %q", out[1], tt.in[1])
			}
		})
	}
}

// sameChunk reports whether b starts right after a in memory (Copy places them so in one chunk).
func sameChunk(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(a)))+uintptr(len(a)) == uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

func TestTailKeep(t *testing.T) {
	s := New(64, 16)
	first := s.Copy([]byte("head"))
	val := append(s.Tail(8), "value"...)
	kept := s.Keep(val)
	if string(kept) != "value" || cap(kept) != len(kept) {
		t.Fatalf("Keep = %q (cap %d), want \"value\" with cap 5", kept, cap(kept))
	}
	if &kept[0] != &val[0] {
		t.Fatal("a value kept in place was copied")
	}
	if !sameChunk(first, kept) {
		t.Fatal("the kept value is not in the chunk after the previous copy")
	}
	next := s.Copy([]byte("next"))
	if !sameChunk(kept, next) || string(kept) != "value" {
		t.Fatalf("the copy after a kept value: %q after %q, want them adjacent and unchanged", next, kept)
	}

	// A value that outgrew the free end was moved by append: Keep copies it.
	s = New(8, 64)
	tail := s.Tail(4)
	grown := append(tail, "twelve bytes"...)
	kept = s.Keep(grown)
	if string(kept) != "twelve bytes" || cap(kept) != len(kept) {
		t.Fatalf("Keep of a moved value = %q (cap %d)", kept, cap(kept))
	}
	if &kept[0] == &grown[0] {
		t.Fatal("a value append moved out of the chunk was kept without a copy")
	}
}
