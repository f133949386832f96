package replication

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
)

// fuzzFrames joins messages into one fuzz input: each is a big-endian uint16 length and the
// message. splitFrames undoes it; a last frame longer than what is left takes the rest.
func fuzzFrames(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(m)))
		b = append(b, m...)
	}
	return b
}

func splitFrames(data []byte) [][]byte {
	var out [][]byte
	for len(data) >= 2 {
		n := int(binary.BigEndian.Uint16(data))
		data = data[2:]
		n = min(n, len(data))
		out = append(out, data[:n])
		data = data[n:]
	}
	return out
}

// fuzzHooks names "id" as the key of tables with REPLICA IDENTITY FULL.
type fuzzHooks struct{ fakeHooks }

func (fuzzHooks) KeyColumns(context.Context, change.ExportID) ([]string, error) {
	return []string{"id"}, nil
}

// maxFuzzFrames bounds the messages of one input (so the unit channel never fills).
const maxFuzzFrames = 256

// FuzzDecode feeds arbitrary pgoutput messages through the stream's decode and encode path
// (streamState.handle: pglogrepl's parser, relations, routing, hold buffers, the codec). An input
// is a sequence of frames (see fuzzFrames); a frame that starts with 'w' (XLogData) or 'k'
// (keepalive) is a CopyData message as the server sends it, any other frame is a pgoutput
// message and is wrapped in XLogData. public.a is hydrated, public.b is being copied (its
// changes are held, then released at the end). Whatever the input, nothing panics, and every
// record is valid JSON (key and value) and valid UTF-8; a message that does not decode is an
// error, after which the state is reset as for a new connection.
//
// Seeds: the messages built by the stream tests, and testdata/fuzz/FuzzDecode, captured from
// PostgreSQL 15 with pg_logical_slot_peek_binary_changes(slot, NULL, NULL, 'proto_version',
// '1', 'publication_names', pub, 'messages', 'true') over inserts, updates (one changing the
// key, one leaving an out-of-line TOAST value unchanged), deletes under REPLICA IDENTITY
// DEFAULT and FULL, logical messages and a truncate, on tables of many column types.
func FuzzDecode(f *testing.F) {
	f.Add(fuzzFrames(relationMsg(1, "public", "a"), relationMsg(2, "public", "b"),
		begin(100, 7), insert(1, "1", "x"), insert(2, "2", "héllo \"q\" \\ 😀"), commit(100, 110), keepalive(200)))
	f.Add(fuzzFrames(relationMsg(1, "public", "a"), begin(100, 7), insert(1, "not a number", "x"), commit(100, 110)))
	f.Add(fuzzFrames(begin(100, 7), insert(9, "1", "x"), commit(100, 110)))
	f.Add(fuzzFrames(relationMsg(3, "public", "unknown"), begin(100, 7), insert(3, "1", "x"), commit(100, 110)))
	f.Add(fuzzFrames(nil, []byte{'w'}, []byte{'k'}, []byte{'R'}, []byte{'I', 0, 0, 0, 1, 'N', 0, 9}))
	// Crashers found: an empty message (pglogrepl.Parse panicked), a column length of ~4 GiB in a
	// short message (pglogrepl allocated it: the fuzz worker ran out of memory).
	f.Add(fuzzFrames(relationMsg(1, "public", "a")[25:], begin(100, 7)[25:],
		[]byte{'I', 0, 0, 0, 1, 'N', 0, 2, 't', 0, 0, 0, 1, '1', 't', 0xff, 0xff, 0xff, 0xf0, 'x'}, commit(100, 110)[25:]))
	// The 10-byte Truncate that made pglogrepl allocate 16 GiB, alone and inside a transaction.
	f.Add(fuzzFrames(truncate10))
	f.Add(fuzzFrames(relationMsg(1, "public", "a")[25:], begin(100, 7)[25:], truncate10, commit(100, 110)[25:]))
	// Every message type with a count or length that lies (hostile_test.go), inside a
	// transaction on relations that exist.
	for _, h := range hostileMessages() {
		msg := h.msg
		if !h.raw {
			msg = xlog(msg)
		}
		f.Add(fuzzFrames(relationMsg(1, "public", "a"), relationMsg(2, "public", "b"), begin(100, 7), msg, commit(100, 110)))
	}
	spill := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) { decodeFrames(t, spill, data) })
}

// decodeFrames is one FuzzDecode run.
func decodeFrames(t *testing.T, spill string, data []byte) {
	s := New(Config{
		Codec:    codec.Config{TopicPrefix: "p", Tombstones: true, MaxRecordBytes: 1 << 20},
		SpillDir: spill, HoldMemory: 4 << 10,
	}, fuzzHooks{})
	tA := change.ExportID{Schema: "public", Table: "a"}
	tB := change.ExportID{Schema: "public", Table: "b"}
	s.Resume(map[change.ExportID]change.LSN{tA: 0})
	out := make(chan *change.Unit, 4*maxFuzzFrames)
	st := s.state
	st.ctx, st.out = t.Context(), out
	defer st.close()
	st.detect([]change.ExportID{tB})
	if err := st.setConsistentPoint([]change.ExportID{tB}, 0); err != nil {
		t.Fatal(err)
	}
	for i, fr := range splitFrames(data) {
		if i == maxFuzzFrames {
			break
		}
		if len(fr) == 0 || (fr[0] != pglogrepl.XLogDataByteID && fr[0] != pglogrepl.PrimaryKeepaliveMessageByteID) {
			fr = xlog(fr)
		}
		if err := st.handle(fr); err != nil {
			if errors.Is(err, errDecoderPanic) {
				t.Fatalf("frame %d (%q): checkMessage let through a message pglogrepl cannot decode: %v", i, fr, err)
			}
			st.reconnected()
		}
		checkUnits(t, out)
	}
	// Release what public.b holds.
	st.copyDone(tB)
	if err := st.yield(); err != nil {
		t.Fatalf("yield: %v", err)
	}
	checkUnits(t, out)
}

// checkUnits drains out and fails on a record that is not valid JSON and UTF-8.
func checkUnits(t *testing.T, out chan *change.Unit) {
	t.Helper()
	for _, u := range drain(out) {
		for _, r := range u.Records {
			for what, b := range map[string][]byte{"key": r.Key, "value": r.Value} {
				if b != nil && (!json.Valid(b) || !utf8.Valid(b)) {
					t.Fatalf("unit %v: record %s is not valid JSON: %q", u.Kind, what, b)
				}
			}
			if r.Value != nil && !bytes.HasPrefix(r.Value, []byte(`{"before":`)) {
				t.Fatalf("unit %v: value is not an envelope: %q", u.Kind, r.Value)
			}
		}
	}
}

// readCorpusEntry returns the []byte of a one-value Go fuzz corpus file.
func readCorpusEntry(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" {
		t.Fatalf("%s: not a one-value corpus file", path)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}

// TestDecodeCapturedSession decodes the session captured from PostgreSQL 15 (the FuzzDecode
// seed pg15_session) with both tables hydrated: every message decodes, and the records are the
// changes the capture made.
func TestDecodeCapturedSession(t *testing.T) {
	data := readCorpusEntry(t, filepath.Join("testdata", "fuzz", "FuzzDecode", "pg15_session"))
	s := New(Config{Codec: codec.Config{TopicPrefix: "p", Tombstones: true}, SpillDir: t.TempDir()}, fuzzHooks{})
	tA := change.ExportID{Schema: "public", Table: "a"}
	tB := change.ExportID{Schema: "public", Table: "b"}
	s.Resume(map[change.ExportID]change.LSN{tA: 0, tB: 0})
	out := make(chan *change.Unit, 1000)
	st := s.state
	st.ctx, st.out = t.Context(), out
	for i, fr := range splitFrames(data) {
		if err := st.handle(xlog(fr)); err != nil {
			t.Fatalf("message %d (%q): %v", i, fr[0], err)
		}
	}
	var got []string
	var after []map[string]json.RawMessage
	for _, u := range drain(out) {
		for _, r := range u.Records {
			var env struct {
				After map[string]json.RawMessage `json:"after"`
				Op    string                     `json:"op"`
			}
			op := "tombstone"
			if r.Value != nil {
				if err := json.Unmarshal(r.Value, &env); err != nil {
					t.Fatalf("%s: %v", r.Value, err)
				}
				op = env.Op
			}
			got = append(got, string(r.Key)+" "+op)
			after = append(after, env.After)
		}
	}
	want := []string{
		`{"id":1} c`, `{"id":2} c`, // a
		`{"id":1} c`, `{"id":2} c`, `{"id":1} u`, // b, b, a in one transaction
		`{"id":2} d`, `{"id":2} tombstone`, `{"id":3} c`, // a: key 2 -> 3
		`{"id":1} u`,                       // b under REPLICA IDENTITY FULL
		`{"id":2} d`, `{"id":2} tombstone`, // b
		`{"id":3} d`, `{"id":3} tombstone`, // a
		`{} t`, `{} t`, // truncate a, b (keyed tables: a key of no columns)
		`{"id":10} c`, `{"id":10} u`, // a: an out-of-line value, then an update leaving it unchanged
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("records:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for col, v := range map[string]string{
		"v": `"héllo \"q\" \\ 😀"`, "n": `"1.50"`, "f": `"NaN"`, "ts": `"2024-01-31T10:34:56.5Z"`,
		"b": `"3q2+7w=="`, "j": `{"a": [1, null]}`, "arr": `[1,null]`, "tarr": `["x y",null,"q\"z"]`, "m": `"happy"`,
	} {
		if string(after[0][col]) != v {
			t.Errorf("first insert: %s = %s, want %s", col, after[0][col], v)
		}
	}
}
