package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
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
	if got := stdout.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		env         map[string]string
		wantBrokers []string
		wantPrefix  string
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
			if strings.Join(cfg.brokers, ",") != strings.Join(tc.wantBrokers, ",") || cfg.prefix != tc.wantPrefix {
				t.Errorf("parseConfig() = %v %q, want %v %q", cfg.brokers, cfg.prefix, tc.wantBrokers, tc.wantPrefix)
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := printable(tc.in); got != tc.want {
				t.Errorf("printable(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}
