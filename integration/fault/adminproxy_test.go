package fault

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// frame is a request frame of api key and a body of n bytes of b.
func frame(key int16, n int, b byte) []byte {
	out := make([]byte, 4+8+n)
	binary.BigEndian.PutUint32(out[0:4], uint32(8+n))
	binary.BigEndian.PutUint16(out[4:6], uint16(key))
	binary.BigEndian.PutUint16(out[6:8], 1)       // api_version
	binary.BigEndian.PutUint32(out[8:12], 0x1234) // correlation_id
	for i := range n {
		out[12+i] = b
	}
	return out
}

// frameServer accepts connections and sends every whole frame it reads on the returned channel.
func frameServer(t *testing.T) (string, <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	got := make(chan []byte, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					var size [4]byte
					if _, err := io.ReadFull(c, size[:]); err != nil {
						return
					}
					body := make([]byte, binary.BigEndian.Uint32(size[:]))
					if _, err := io.ReadFull(c, body); err != nil {
						return
					}
					got <- append(size[:], body...)
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}

func TestHoldProxy(t *testing.T) {
	target, got := frameServer(t)
	p, err := NewHoldProxy("127.0.0.1:0", target, APIKeyCreateTopics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	expect := func(want []byte, within time.Duration) {
		t.Helper()
		select {
		case f := <-got:
			if !bytes.Equal(f, want) {
				t.Fatalf("the server got a frame of %d bytes (key %d), want %d bytes (key %d)",
					len(f), binary.BigEndian.Uint16(f[4:6]), len(want), binary.BigEndian.Uint16(want[4:6]))
			}
		case <-time.After(within):
			t.Fatalf("the frame of key %d did not arrive within %s", binary.BigEndian.Uint16(want[4:6]), within)
		}
	}
	admin, normal := dial(), dial()

	// No hold: everything passes, a frame larger than the proxy's read buffer whole.
	create := frame(APIKeyCreateTopics, 100, 'c')
	big := frame(0, 300<<10, 'p')
	_, _ = admin.Write(create)
	expect(create, 5*time.Second)
	_, _ = normal.Write(big)
	expect(big, 5*time.Second)

	// A hold catches CreateTopics, and what follows it on its connection; other connections
	// and other keys pass.
	p.Hold()
	metadata := frame(3, 40, 'm')
	_, _ = admin.Write(slices.Concat(create, metadata))
	_, _ = normal.Write(metadata)
	expect(metadata, 5*time.Second)
	select {
	case f := <-got:
		t.Fatalf("a frame of key %d went through during the hold", binary.BigEndian.Uint16(f[4:6]))
	case <-time.After(300 * time.Millisecond):
	}
	if p.Held() != 1 || p.Waiting() != 1 {
		t.Errorf("during the hold: held %d, waiting %d, want 1 and 1", p.Held(), p.Waiting())
	}

	p.Release()
	expect(create, 5*time.Second)
	expect(metadata, 5*time.Second)
	_, _ = admin.Write(create)
	expect(create, 5*time.Second)
	if p.Held() != 1 || p.Waiting() != 0 || p.Seen(APIKeyCreateTopics) != 3 {
		t.Errorf("after the release: held %d, waiting %d, seen %d, want 1, 0 and 3", p.Held(), p.Waiting(), p.Seen(APIKeyCreateTopics))
	}
}
