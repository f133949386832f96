package replication

import (
	"encoding/binary"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// hostileMessage is a replication message whose counts or lengths lie: it declares more than it
// holds. raw messages are CopyData payloads as the server sends them; the others are pgoutput
// messages, wrapped in XLogData.
type hostileMessage struct {
	name string
	msg  []byte
	raw  bool
}

// truncate10 is the 10-byte Truncate that made pglogrepl allocate 16 GiB: 2^32-1 relations,
// options, one relation OID.
var truncate10 = []byte{'T', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 1}

func be16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
func be32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }

// hostileMessages covers every message type the stage decodes, and the wrappers.
func hostileMessages() []hostileMessage {
	lsn := make([]byte, 8)
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	str := func(s string) []byte { return append([]byte(s), 0) }
	relHead := cat([]byte{'R'}, be32(nil, 1), str("public"), str("a"), []byte{'d'})
	column := cat([]byte{1}, str("id"), be32(nil, 23), be32(nil, 0xffffffff))
	return []hostileMessage{
		{name: "truncate of 2^32-1 relations in 10 bytes", msg: truncate10},
		{name: "truncate of 3 relations holding 2", msg: cat([]byte{'T'}, be32(nil, 3), []byte{0}, be32(nil, 1), be32(nil, 2))},
		{name: "truncate without options", msg: cat([]byte{'T'}, be32(nil, 1))},
		{name: "begin shorter than its fields", msg: cat([]byte{'B'}, lsn, lsn, []byte{0, 0, 7})},
		{name: "commit shorter than its fields", msg: cat([]byte{'C', 0}, lsn, lsn, lsn[:7])},
		{name: "origin shorter than its LSN", msg: []byte{'O', 0, 0, 0, 1}},
		{name: "origin name without NUL", msg: cat([]byte{'O'}, lsn, []byte("origin"))},
		{name: "type name without NUL", msg: cat([]byte{'Y'}, be32(nil, 16384), str("public"), []byte("mood"))},
		{name: "relation name without NUL", msg: cat([]byte{'R'}, be32(nil, 1), str("public"), []byte("a"))},
		{name: "relation of 65535 columns holding 1", msg: cat(relHead, be16(nil, 0xffff), column)},
		{name: "relation of 2 columns holding 1", msg: cat(relHead, be16(nil, 2), column)},
		{name: "relation column name without NUL", msg: cat(relHead, be16(nil, 1), []byte{1}, []byte("id"))},
		{name: "relation column without its type", msg: cat(relHead, be16(nil, 1), []byte{1}, str("id"), be32(nil, 23))},
		{name: "relation without column count", msg: relHead},
		{name: "message content of 2 GiB in 1 byte", msg: cat([]byte{'M', 0}, lsn, str("p"), be32(nil, 0x7fffffff), []byte("x"))},
		{name: "message content of 4 GiB", msg: cat([]byte{'M', 1}, lsn, str("p"), be32(nil, 0xffffffff))},
		{name: "message prefix without NUL", msg: cat([]byte{'M', 0}, lsn, []byte("tidemark"))},
		{name: "insert of 65535 columns in 1 byte", msg: cat([]byte{'I'}, be32(nil, 1), []byte{'N'}, be16(nil, 0xffff), []byte{'n'})},
		{name: "insert column of 4 GiB", msg: cat([]byte{'I'}, be32(nil, 1), []byte{'N'}, be16(nil, 1), []byte{'t'}, be32(nil, 0xfffffff0), []byte("x"))},
		{name: "insert column of 2 GiB", msg: cat([]byte{'I'}, be32(nil, 1), []byte{'N'}, be16(nil, 1), []byte{'b'}, be32(nil, 0x7fffffff), []byte("x"))},
		{name: "insert column length cut short", msg: cat([]byte{'I'}, be32(nil, 1), []byte{'N'}, be16(nil, 1), []byte{'t', 0, 0})},
		{name: "update old tuple of 2 columns holding 1", msg: cat([]byte{'U'}, be32(nil, 1), []byte{'O'}, be16(nil, 2), []byte{'n'})},
		{name: "update new tuple column of 1 GiB", msg: cat([]byte{'U'}, be32(nil, 1), []byte{'N'}, be16(nil, 2), []byte{'n', 't'}, be32(nil, 1<<30), []byte("x"))},
		{name: "update key tuple then no new tuple", msg: cat([]byte{'U'}, be32(nil, 1), []byte{'K'}, be16(nil, 1), []byte{'n'})},
		{name: "delete key tuple of 300 columns holding 2", msg: cat([]byte{'D'}, be32(nil, 1), []byte{'K'}, be16(nil, 300), []byte{'n', 'n'})},
		{name: "delete key column of 64 KiB in 3 bytes", msg: cat([]byte{'D'}, be32(nil, 1), []byte{'K'}, be16(nil, 1), []byte{'t'}, be32(nil, 1<<16), []byte("abc"))},
		{name: "stream start (not asked for)", msg: cat([]byte{'S'}, be32(nil, 7), []byte{1})},
		{name: "stream commit (not asked for)", msg: cat([]byte{'c'}, be32(nil, 7), []byte{0}, lsn, lsn, lsn)},
		{name: "unknown message type", msg: []byte{'Z', 0xff, 0xff, 0xff, 0xff}},
		{name: "empty pgoutput message", msg: nil},
		{name: "xlogdata shorter than its header", msg: cat([]byte{pglogrepl.XLogDataByteID}, lsn, lsn), raw: true},
		{name: "keepalive one byte short", msg: cat([]byte{pglogrepl.PrimaryKeepaliveMessageByteID}, lsn, lsn), raw: true},
		{name: "keepalive one byte long", msg: cat([]byte{pglogrepl.PrimaryKeepaliveMessageByteID}, lsn, lsn, []byte{0, 0}), raw: true},
	}
}

// TestDecodersRefuseLyingLengths: every decoder (each pgoutput message type, the row-change
// fast path, the XLogData and keepalive wrappers) refuses a message that declares more than it
// holds, with an error, and allocates next to nothing doing so (pglogrepl allocated 16 GiB for
// the 10-byte Truncate).
func TestDecodersRefuseLyingLengths(t *testing.T) {
	const maxAlloc = 1 << 20
	for _, tc := range hostileMessages() {
		t.Run(tc.name, func(t *testing.T) {
			st, out := newTestStream(t, 0)
			feed(t, st, begin(0x100, 7))
			msg := tc.msg
			if !tc.raw {
				msg = xlog(msg)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err := st.handle(msg)
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatalf("handle(%q) = nil, want an error", tc.msg)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > maxAlloc {
				t.Fatalf("handle allocated %d bytes for a message of %d (err %v)", n, len(msg), err)
			}
			if us := drain(out); len(us) != 0 {
				t.Fatalf("a refused message produced %d units", len(us))
			}
			t.Logf("%v", err)
		})
	}
}

// TestDecodeUnderMemoryLimit runs the hostile messages (TestDecodersRefuseLyingLengths and
// FuzzDecode's seeds) in a child process limited to 4 GiB of address space (ulimit -v), where
// an allocation sized from a lying count is not merely counted but kills the process with a
// fatal error no recover catches, as it would a container under a memory limit.
func TestDecodeUnderMemoryLimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ulimit -v is how this test limits memory; it runs on Linux")
	}
	cmd := exec.CommandContext(t.Context(), "/bin/sh", "-c", `ulimit -v 4194304 && exec "$@"`, "sh",
		os.Args[0], "-test.run", "^(TestDecodersRefuseLyingLengths|FuzzDecode)$", "-test.count", "1", "-test.v")
	// glibc reserves 64 MiB of address space per thread arena (cgo threads): keep it to two.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=2", "MALLOC_ARENA_MAX=2")
	out, err := cmd.CombinedOutput()
	if err != nil {
		// The first lines name the message and the fatal error; a goroutine dump follows.
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		var head []string
		for _, l := range lines {
			if strings.HasPrefix(l, "=== RUN") || strings.HasPrefix(l, "--- FAIL") || strings.Contains(l, "fatal error") ||
				strings.Contains(l, "out of memory") || strings.Contains(l, ".go:") && strings.HasPrefix(strings.TrimSpace(l), "hostile_test") {
				head = append(head, l)
			}
		}
		t.Fatalf("under a 4 GiB address-space limit: %v\n%s", err, strings.Join(head[max(0, len(head)-6):], "\n"))
	}
	if !strings.Contains(string(out), "--- PASS: TestDecodersRefuseLyingLengths") || !strings.Contains(string(out), "--- PASS: FuzzDecode") {
		t.Fatalf("the child did not run both tests:\n%s", out)
	}
}
