package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/kafkaconn"
)

// buildTail builds cmd/tidemark-tail into the test's temporary folder.
func buildTail(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "tidemark-tail")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/tidemark-tail")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build tidemark-tail: %v\n%s", err, out)
	}
	return bin
}

// TestTailSecuredKafka runs the built tidemark-tail against a broker with secured listeners,
// configured by cdc's own variables: SCRAM-SHA-512 over TLS and mutual TLS print every record,
// with control characters escaped; a wrong password fails at once with cdc's sentence and
// without the password.
func TestTailSecuredKafka(t *testing.T) {
	k := testenv.StartSecureKafka(t)
	tail := buildTail(t)
	const prefix = "tailsec"
	topic := prefix + ".public.t"
	scram := kafkaconn.Security{TLS: true, CAFile: k.CAFile, SASLMechanism: kafkaconn.SASLScramSHA512, Username: k.ScramUser, Password: k.ScramPassword}
	opts, err := scram.ClientOpts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.SASLSSL)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	recs := []*kgo.Record{
		{Topic: topic, Key: []byte(`{"id":1}`), Value: []byte(`{"after":{"id":1,"note":"plain"}}`)},
		{Topic: topic, Key: []byte(`{"id":2}`), Value: []byte("{\"note\":\"\x1b[2J\x1b]0;owned\x07\u009b31m\"}"),
			Headers: []kgo.RecordHeader{{Key: "x\x1b[1m", Value: []byte("\x7f")}}},
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	want := []string{
		topic + "\t0\t0\t{\"id\":1}\t{\"after\":{\"id\":1,\"note\":\"plain\"}}\n",
		topic + "\t0\t1\t{\"id\":2}\t\"{\\\"note\\\":\\\"\\x1b[2J\\x1b]0;owned\\a\\u009b31m\\\"}\"\t\"x\\x1b[1m\"=\"\\x7f\"\n",
	}

	runTail := func(t *testing.T, broker string, vars map[string]string) (string, string, error) {
		t.Helper()
		cmd := exec.Command(tail, "-timeout", "30s")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "TAIL_BROKERS=" + broker, "TAIL_PREFIX=" + prefix}
		for k, v := range vars {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	tls := map[string]string{"CDC_KAFKA_TLS_CA_FILE": k.CAFile}
	for _, tc := range []struct {
		name   string
		broker string
		vars   map[string]string
	}{
		{"SCRAM-SHA-512 over TLS", k.SASLSSL, merge(tls, map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
			"CDC_KAFKA_SASL_USERNAME": k.ScramUser, "CDC_KAFKA_SASL_PASSWORD": k.ScramPassword})},
		{"mutual TLS", k.MTLS, merge(tls, map[string]string{"CDC_KAFKA_TLS_CERT_FILE": k.ClientCert, "CDC_KAFKA_TLS_KEY_FILE": k.ClientKey})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := runTail(t, tc.broker, tc.vars)
			if err != nil {
				t.Fatalf("tidemark-tail: %v\n%s", err, errOut)
			}
			if out != strings.Join(want, "") {
				t.Errorf("output\n%q\nwant\n%q", out, strings.Join(want, ""))
			}
			if strings.ContainsAny(out, "\x1b\x07\x7f\u009b") {
				t.Errorf("a control character reached the output: %q", out)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		start := time.Now()
		out, errOut, err := runTail(t, k.SASLSSL, merge(tls, map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
			"CDC_KAFKA_SASL_USERNAME": k.ScramUser, "CDC_KAFKA_SASL_PASSWORD": "not-" + k.ScramPassword}))
		if err == nil {
			t.Fatalf("tidemark-tail succeeded with a wrong password: %s", out)
		}
		assertContains(t, errOut, "Kafka rejected the SCRAM-SHA-512 credentials", "CDC_KAFKA_SASL_PASSWORD")
		checkNoSecrets(t, "tidemark-tail's output", out+errOut, []string{k.ScramPassword})
		if took := time.Since(start); took > 25*time.Second {
			t.Errorf("gave up after %s, want before its 30s timeout", took)
		}
	})
}
