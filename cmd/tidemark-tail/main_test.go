package main

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/kafkaconn"
)

func TestRunPrintsCommittedRecordsOfPrefixedTopics(t *testing.T) {
	ctx := t.Context()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "demo.public.a"),
		kfake.SeedTopics(1, "demo.public.b", "demo.__watermarks", "other.public.a", "demoextra.x"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	brokers := strings.Join(c.ListenAddrs(), ",")

	plain, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Close)
	produce := func(topic string, p int32, key, value string) {
		t.Helper()
		r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(key)}
		if value != "" {
			r.Value = []byte(value)
		}
		if err := plain.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", topic, err)
		}
	}
	produce("demo.public.a", 0, "k1", `{"id":1}`)
	produce("demo.public.a", 1, "k2", `{"id":2}`)
	produce("demo.public.a", 0, "k1", "") // tombstone
	produce("other.public.a", 0, "x", "not mine")
	produce("demoextra.x", 0, "x", "not mine either")

	// One committed and one aborted transaction on demo.public.b: only the first is printed,
	// and the markers must not keep the reader waiting.
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("tail-test"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(txn.Close)
	for _, commit := range []kgo.TransactionEndTry{kgo.TryCommit, kgo.TryAbort} {
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		val := map[kgo.TransactionEndTry]string{kgo.TryCommit: "committed", kgo.TryAbort: "aborted"}[commit]
		txn.Produce(ctx, &kgo.Record{Topic: "demo.public.b", Key: []byte("t"), Value: []byte(val)}, nil)
		if err := txn.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := txn.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}

	var stdout, stderr bytes.Buffer
	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = run(runCtx, []string{"-timeout", "20s"},
		func(k string) string { return map[string]string{"TAIL_BROKERS": brokers, "TAIL_PREFIX": "demo"}[k] },
		&stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v (stderr %q)", err, stderr.String())
	}
	want := strings.Join([]string{
		"demo.public.a\t0\t0\tk1\t{\"id\":1}",
		"demo.public.a\t0\t1\tk1\t<nil>",
		"demo.public.a\t1\t0\tk2\t{\"id\":2}",
		"demo.public.b\t0\t0\tt\tcommitted",
	}, "\n") + "\n"
	// Records print as they arrive: partitions interleave, each in offset order.
	lines := strings.SplitAfter(stdout.String(), "\n")
	slices.SortStableFunc(lines, func(a, b string) int {
		fa, fb := strings.SplitN(a, "\t", 3), strings.SplitN(b, "\t", 3)
		return strings.Compare(strings.Join(fa[:min(2, len(fa))], "\t"), strings.Join(fb[:min(2, len(fb))], "\t"))
	})
	if got := strings.Join(lines, ""); got != want {
		t.Errorf("output:\n%s\nwant (partitions sorted):\n%s", stdout.String(), want)
	}
}

// signalWriter is an output that signals its first write.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() == 0 {
		close(w.wrote)
	}
	return w.buf.Write(p)
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestConsumeStreams: a record is printed as soon as it is read, while another partition is
// still being waited for; nothing waits for the whole read to end.
func TestConsumeStreams(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "demo.fast", "demo.slow"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	for _, topic := range []string{"demo.fast", "demo.slow"} {
		if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	// demo.slow's end lies past what it holds: the read cannot finish.
	targets := map[string]map[int32]span{"demo.fast": {0: {0, 1}}, "demo.slow": {0: {0, 1000}}}
	out := &signalWriter{wrote: make(chan struct{})}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- consume(ctx, kafkaconn.Settings{Brokers: c.ListenAddrs()}, targets, nil, out) }()
	select {
	case <-out.wrote:
	case err := <-done:
		t.Fatalf("consume returned (%v) before the read could end", err)
	case <-time.After(30 * time.Second):
		t.Fatal("nothing printed within 30s while a partition was still being read: the output is buffered")
	}
	if got := out.String(); !strings.Contains(got, "demo.fast\t0\t0\tk\tv\n") {
		t.Errorf("first output %q, want demo.fast's record", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("consume after cancel: %v, want context.Canceled", err)
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		env         map[string]string
		wantBrokers []string
		wantPrefix  string
		wantTLS     bool
		wantSASL    string
		wantErr     bool
	}{
		{name: "defaults", wantBrokers: []string{"127.0.0.1:59092"}, wantPrefix: "tidemark"},
		{name: "env", env: map[string]string{"TAIL_BROKERS": "a:1, b:2", "TAIL_PREFIX": "demo"},
			wantBrokers: []string{"a:1", "b:2"}, wantPrefix: "demo"},
		{name: "flags over env", args: []string{"-brokers", "c:3", "-prefix", "p"},
			env: map[string]string{"TAIL_BROKERS": "a:1", "TAIL_PREFIX": "demo"}, wantBrokers: []string{"c:3"}, wantPrefix: "p"},
		{name: "empty brokers", args: []string{"-brokers", " , "}, wantErr: true},
		{name: "empty prefix", args: []string{"-prefix", ""}, wantErr: true},
		{name: "stray argument", args: []string{"extra"}, wantErr: true},
		{name: "cdc's brokers", env: map[string]string{"CDC_KAFKA_BROKERS": "k:9093"}, wantBrokers: []string{"k:9093"}, wantPrefix: "tidemark"},
		{name: "TLS", env: map[string]string{"CDC_KAFKA_TLS": "true", "CDC_KAFKA_SASL_MECHANISM": "scram-sha-512",
			"CDC_KAFKA_SASL_USERNAME": "u", "CDC_KAFKA_SASL_PASSWORD": "p"},
			wantBrokers: []string{"127.0.0.1:59092"}, wantPrefix: "tidemark", wantTLS: true, wantSASL: "SCRAM-SHA-512"},
		{name: "TLS implied by a server name", env: map[string]string{"CDC_KAFKA_TLS_SERVER_NAME": "kafka"},
			wantBrokers: []string{"127.0.0.1:59092"}, wantPrefix: "tidemark", wantTLS: true},
		{name: "bad TLS", env: map[string]string{"CDC_KAFKA_TLS": "maybe"}, wantErr: true},
		{name: "SASL without user", env: map[string]string{"CDC_KAFKA_SASL_MECHANISM": "PLAIN"}, wantErr: true},
		{name: "missing CA file", env: map[string]string{"CDC_KAFKA_TLS_CA_FILE": "/nonexistent/ca.pem"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			cfg, err := parseConfig(tc.args, func(k string) string { return tc.env[k] }, &stderr)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("parseConfig() = %+v, want error", cfg)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseConfig(): %v", err)
			}
			if strings.Join(cfg.brokers, ",") != strings.Join(tc.wantBrokers, ",") || cfg.prefix != tc.wantPrefix ||
				cfg.security.TLS != tc.wantTLS || cfg.security.SASLMechanism != tc.wantSASL {
				t.Errorf("parseConfig() = %v %q TLS %v SASL %q, want %v %q %v %q", cfg.brokers, cfg.prefix, cfg.security.TLS,
					cfg.security.SASLMechanism, tc.wantBrokers, tc.wantPrefix, tc.wantTLS, tc.wantSASL)
			}
		})
	}
}

func TestPrintable(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{name: "nil", in: nil, want: "<nil>"},
		{name: "empty", in: []byte{}, want: ""},
		{name: "json", in: []byte(`{"a":1}`), want: `{"a":1}`},
		{name: "binary", in: []byte{0xff, 0x00}, want: `"\xff\x00"`},
		{name: "tab", in: []byte("a\tb"), want: `"a\tb"`},
		{name: "newline", in: []byte("a\nb"), want: `"a\nb"`},
		{name: "carriage return", in: []byte("ok\rEVIL"), want: `"ok\rEVIL"`},
		{name: "ANSI colour", in: []byte("\x1b[31mred\x1b[0m"), want: `"\x1b[31mred\x1b[0m"`},
		{name: "ANSI title (OSC)", in: []byte("\x1b]0;pwned\x07"), want: `"\x1b]0;pwned\a"`},
		{name: "C1 CSI", in: []byte("\u009b31m"), want: `"\u009b31m"`},
		{name: "C1 NEL", in: []byte("a\u0085b"), want: `"a\u0085b"`},
		{name: "DEL", in: []byte("a\x7fb"), want: `"a\x7fb"`},
		{name: "NUL", in: []byte("a\x00"), want: `"a\x00"`},
		{name: "backspace", in: []byte("abc\b\b"), want: `"abc\b\b"`},
		{name: "bidi override", in: []byte("abc\u202edef"), want: `"abc\u202edef"`},
		{name: "line separator", in: []byte("a\u2028b"), want: `"a\u2028b"`},
		{name: "printable unicode", in: []byte("héllo 世界 🙂 ñ"), want: "héllo 世界 🙂 ñ"},
		{name: "json with escapes", in: []byte(`{"a":"x\"y\\n"}`), want: `{"a":"x\"y\\n"}`},
		{name: "starts with a quote", in: []byte(`"x"`), want: `"\"x\""`},
		{name: "the nil marker", in: []byte("<nil>"), want: `"<nil>"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := printable(tc.in); got != tc.want {
				t.Errorf("printable(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

// TestRecordLineEscapesEverything: the key, the value and the headers' names and values of a
// record are all escaped, and the line has exactly the tabs and newline of its fields.
func TestRecordLineEscapesEverything(t *testing.T) {
	esc := []byte("\x1b[2J\x1b[31m")
	r := &kgo.Record{Topic: "demo.public.t", Partition: 1, Offset: 7, Key: esc, Value: append([]byte("v\n"), esc...),
		Headers: []kgo.RecordHeader{{Key: "h\x1b]0;x\x07", Value: esc}, {Key: "a=b", Value: []byte("ok")}, {Key: "tidemark.op", Value: []byte("c")}}}
	line, _ := appendRecord(nil, nil, r, nil)
	got := string(line)
	want := `demo.public.t	1	7	"\x1b[2J\x1b[31m"	"v\n\x1b[2J\x1b[31m"	"h\x1b]0;x\a"="\x1b[2J\x1b[31m"	"a=b"=ok	tidemark.op=c` + "\n"
	if got != want {
		t.Errorf("line\n%q\nwant\n%q", got, want)
	}
	for i, c := range []byte(got[:len(got)-1]) {
		if c < 0x20 && c != '\t' || c == 0x7f {
			t.Errorf("byte %d of the line is control character %#x", i, c)
		}
	}
}
