package integration

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/kafkaconn"
	"github.com/tidemark/cdc/pkg/wait"
)

// TestKafkaSecurity runs cdc against a real broker that the suite configures with secured
// listeners and a throwaway CA: SCRAM-SHA-512 and PLAIN over TLS, SCRAM in plain text, mutual
// TLS and OAUTHBEARER (the broker's unsecured-token validator). Data flows end to end in each.
// A wrong password, an unknown CA and a wrong server name each stop cdc at start-up with one
// sentence saying what to fix. No secret (passwords, token, key file contents) ever appears in
// cdc's output or on its HTTP endpoints.
func TestKafkaSecurity(t *testing.T) {
	k := testenv.StartSecureKafka(t)
	token := testenv.UnsecuredToken("tidemark")
	tokenFile := filepath.Join(k.Dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(k.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	keyBody := strings.Split(strings.TrimSpace(string(keyPEM)), "\n")[1] // a line of the key itself
	secrets := []string{k.ScramPassword, k.PlainPassword, token, keyBody}

	tls := map[string]string{"CDC_KAFKA_TLS_CA_FILE": k.CAFile}
	cases := []struct {
		name    string
		brokers string
		vars    map[string]string
		sec     kafkaconn.Security
	}{
		{"SCRAM-SHA-512 over TLS", k.SASLSSL, merge(tls, map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
			"CDC_KAFKA_SASL_USERNAME": k.ScramUser, "CDC_KAFKA_SASL_PASSWORD": k.ScramPassword}),
			kafkaconn.Security{TLS: true, CAFile: k.CAFile, SASLMechanism: kafkaconn.SASLScramSHA512, Username: k.ScramUser, Password: k.ScramPassword}},
		{"PLAIN over TLS", k.SASLSSL, merge(tls, map[string]string{"CDC_KAFKA_SASL_MECHANISM": "PLAIN",
			"CDC_KAFKA_SASL_USERNAME": k.PlainUser, "CDC_KAFKA_SASL_PASSWORD": k.PlainPassword}),
			kafkaconn.Security{TLS: true, CAFile: k.CAFile, SASLMechanism: kafkaconn.SASLPlain, Username: k.PlainUser, Password: k.PlainPassword}},
		{"SCRAM-SHA-256 in plain text", k.SASLPlaintext, map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
			"CDC_KAFKA_SASL_USERNAME": k.ScramUser, "CDC_KAFKA_SASL_PASSWORD": k.ScramPassword},
			kafkaconn.Security{SASLMechanism: kafkaconn.SASLScramSHA256, Username: k.ScramUser, Password: k.ScramPassword}},
		{"mutual TLS", k.MTLS, merge(tls, map[string]string{"CDC_KAFKA_TLS_CERT_FILE": k.ClientCert, "CDC_KAFKA_TLS_KEY_FILE": k.ClientKey}),
			kafkaconn.Security{TLS: true, CAFile: k.CAFile, CertFile: k.ClientCert, KeyFile: k.ClientKey}},
		{"OAUTHBEARER token file over TLS", k.SASLSSL, merge(tls, map[string]string{"CDC_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
			"CDC_KAFKA_SASL_OAUTH_TOKEN_FILE": tokenFile}),
			kafkaconn.Security{TLS: true, CAFile: k.CAFile, SASLMechanism: kafkaconn.SASLOAuthBearer, Token: token}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := t.Context()
			e.brokers = []string{tc.brokers}
			e.exec(`CREATE TABLE orders (id int PRIMARY KEY, note text)`, `INSERT INTO orders VALUES (1, 'first')`)
			vars := merge(e.baseVars(), tc.vars)
			vars["CDC_KAFKA_BROKERS"] = tc.brokers
			vars["CDC_TABLES"] = "public.orders"
			vars["CDC_HTTP_ADDR"] = freeAddr(t)
			p := e.startCDC(vars)
			opts, err := tc.sec.ClientOpts()
			if err != nil {
				t.Fatal(err)
			}
			w, err := wait.New(e.brokers, e.watermarkTopic(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			e.exec(`INSERT INTO orders VALUES (2, 'second')`)
			wctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			if _, err := w.Until(wctx, e.currentLSN(ctx), change.ExportID{Schema: "public", Table: "orders"}); err != nil {
				t.Fatalf("watermark of public.orders over %s: %v\n%s", tc.name, err, tail(p.log.String(), 3000))
			}
			if n := countRecords(t, tc.brokers, e.topic("public.orders"), opts); n != 2 {
				t.Errorf("topic holds %d records, want 2", n)
			}
			checkNoSecrets(t, "cdc's output and HTTP endpoints", collectHTTP(t, vars["CDC_HTTP_ADDR"])+p.log.String(), secrets)
			p.stop(syscall.SIGTERM)
			checkNoSecrets(t, "cdc's output", p.log.String(), secrets)
		})
	}

	// cdc check as a user the broker grants nothing: topic creation and transactions refused.
	t.Run("check without permissions", func(t *testing.T) {
		e := newEnv(t)
		e.exec(`CREATE TABLE orders (id int PRIMARY KEY)`)
		vars := merge(e.baseVars(), merge(tls, map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
			"CDC_KAFKA_SASL_USERNAME": k.RestrictedUser, "CDC_KAFKA_SASL_PASSWORD": k.RestrictedPassword}))
		vars["CDC_KAFKA_BROKERS"] = k.SASLSSL
		vars["CDC_TABLES"] = "public.orders"
		res := runCDC(t, vars, time.Minute, "check")
		if res.code == 0 {
			t.Errorf("cdc check passed for a user without permissions")
		}
		assertContains(t, res.out, "✓ Kafka: 1 brokers reachable", "✗ Kafka: creating topic", "AUTHORIZATION_FAILED",
			"✗ Kafka: transactions unavailable", "CDC_DELIVERY=at-least-once")
		checkNoSecrets(t, "cdc check's output", res.out, append(secrets, k.RestrictedPassword))
		// The same setup passes as a permitted user.
		vars["CDC_KAFKA_SASL_USERNAME"], vars["CDC_KAFKA_SASL_PASSWORD"] = k.ScramUser, k.ScramPassword
		if res := runCDC(t, vars, time.Minute, "check"); res.code != 0 {
			t.Errorf("cdc check as a permitted user: exit %d", res.code)
		}
		e.assertClean()
	})

	// Start-up failures: one sentence, naming what to fix; no secret in it.
	fails := []struct {
		name    string
		brokers string
		vars    map[string]string
		want    []string
	}{
		{"wrong password", k.SASLSSL, merge(tls, map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
			"CDC_KAFKA_SASL_USERNAME": k.ScramUser, "CDC_KAFKA_SASL_PASSWORD": "not-" + k.ScramPassword}),
			[]string{"Kafka rejected the SCRAM-SHA-512 credentials", "CDC_KAFKA_SASL_PASSWORD"}},
		{"unknown CA", k.SASLSSL, map[string]string{"CDC_KAFKA_TLS_CA_FILE": k.OtherCAFile, "CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
			"CDC_KAFKA_SASL_USERNAME": k.ScramUser, "CDC_KAFKA_SASL_PASSWORD": k.ScramPassword},
			[]string{"signed by an authority not in CDC_KAFKA_TLS_CA_FILE", "set CDC_KAFKA_TLS_CA_FILE"}},
		{"wrong server name", k.SASLSSL, merge(tls, map[string]string{"CDC_KAFKA_TLS_SERVER_NAME": "kafka.example.com",
			"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "CDC_KAFKA_SASL_USERNAME": k.ScramUser, "CDC_KAFKA_SASL_PASSWORD": k.ScramPassword}),
			[]string{"TLS certificate is not valid for", "kafka.example.com", "set CDC_KAFKA_TLS_SERVER_NAME"}},
	}
	for _, tc := range fails {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.exec(`CREATE TABLE orders (id int PRIMARY KEY)`)
			vars := merge(e.baseVars(), tc.vars)
			vars["CDC_KAFKA_BROKERS"] = tc.brokers
			vars["CDC_TABLES"] = "public.orders"
			res := runCDC(t, vars, time.Minute)
			if res.code == 0 {
				t.Fatalf("cdc started with %s", tc.name)
			}
			if res.took > 30*time.Second {
				t.Errorf("took %s to give up, want seconds", res.took)
			}
			assertContains(t, res.out, tc.want...)
			checkNoSecrets(t, "cdc's output", res.out, append(secrets, "not-"+k.ScramPassword))
		})
	}
}

func merge(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// countRecords counts the committed records of topic.
func countRecords(t testing.TB, broker, topic string, opts []kgo.Opt) int {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(broker), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := 0
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(*kgo.Record) { n++ })
		if n >= 2 {
			// Give a moment for anything unexpected beyond the two rows.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			cl.PollFetches(ctx).EachRecord(func(*kgo.Record) { n++ })
			cancel()
			break
		}
	}
	return n
}

// collectHTTP returns what cdc's HTTP endpoints answer.
func collectHTTP(t testing.TB, addr string) string {
	var b strings.Builder
	for _, path := range []string{"/healthz", "/readyz", "/exports", "/metrics"} {
		code, body := httpGet("http://" + addr + path)
		b.WriteString(path + " " + code + "\n" + body + "\n")
	}
	return b.String()
}

func checkNoSecrets(t testing.TB, where, text string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(text, s) {
			t.Errorf("%s shows a secret (%d characters starting %q)", where, len(s), s[:min(3, len(s))])
		}
	}
}

// httpGet returns the status and body of a GET (the error as body when there is no answer).
func httpGet(url string) (string, string) {
	resp, err := http.Get(url)
	if err != nil {
		return "error", err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.Status, string(b)
}
