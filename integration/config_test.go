package integration

import (
	"maps"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testenv"
)

// TestConfiguredFileIsAFIFO names a FIFO as a CA file (Kafka's CDC_KAFKA_TLS_CA_FILE, and
// PostgreSQL's sslrootcert in CDC_PG_URL): `cdc check` and `cdc run` each refuse it at once as a
// configuration error (exit 2) that says what the file is, where they used to wait for a writer
// forever, deaf to SIGTERM.
func TestConfiguredFileIsAFIFO(t *testing.T) {
	brokers := testenv.Brokers(t)
	pgURL := testenv.PGURL(t)
	fifo := filepath.Join(t.TempDir(), "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		vars map[string]string
		want string
	}{
		{"Kafka CA file", map[string]string{"CDC_PG_URL": pgURL, "CDC_KAFKA_BROKERS": strings.Join(brokers, ","), "CDC_KAFKA_TLS_CA_FILE": fifo},
			"CDC_KAFKA_TLS_CA_FILE: " + fifo + " is a named pipe, not a regular file"},
		{"PostgreSQL sslrootcert", map[string]string{"CDC_PG_URL": withParam(pgURL, "sslmode=verify-full&sslrootcert="+fifo),
			"CDC_KAFKA_BROKERS": strings.Join(brokers, ",")}, "CDC_PG_URL: sslrootcert " + fifo + " is a named pipe, not a regular file"},
	}
	for _, tc := range cases {
		for _, cmd := range []string{"check", "run"} {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				// runCDC fails the test if cdc is still running after the timeout.
				res := runCDC(t, tc.vars, 30*time.Second, cmd)
				if res.code != 2 {
					t.Errorf("exit %d, want 2 (invalid configuration)", res.code)
				}
				assertContains(t, res.out, "invalid configuration", tc.want)
				if res.took > 10*time.Second {
					t.Errorf("took %s to refuse the FIFO, want a few seconds at most", res.took)
				}
			})
		}
	}
}

// withParam returns the URL u with the query parameters q replacing its sslmode.
func withParam(u, q string) string {
	base, query, _ := strings.Cut(u, "?")
	var keep []string
	for _, kv := range strings.Split(query, "&") {
		if kv != "" && !strings.HasPrefix(kv, "sslmode=") {
			keep = append(keep, kv)
		}
	}
	return base + "?" + strings.Join(append(keep, q), "&")
}

// TestTLSPosture runs `cdc check` and `cdc run` against the shared servers, which speak no TLS:
// each connection's posture is printed (check) and logged (run), an unverified PostgreSQL
// connection and SASL credentials over plaintext as warnings with their fix, and
// CDC_REQUIRE_TLS=true turns them into configuration errors.
func TestTLSPosture(t *testing.T) {
	e := newEnv(t)
	e.exec(`CREATE TABLE orders (id int PRIMARY KEY)`)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.orders"

	t.Run("check, sslmode=disable", func(t *testing.T) {
		res := runCDC(t, vars, time.Minute, "check")
		if res.code != 0 {
			t.Errorf("exit %d: warnings must not fail the check", res.code)
		}
		assertContains(t, res.out,
			"! PostgreSQL: not encrypted (sslmode=disable): data and credentials cross the network in plaintext",
			"fix: add sslmode=verify-full and sslrootcert=<CA file> to CDC_PG_URL",
			"✓ Kafka: not encrypted (CDC_KAFKA_TLS=false); no SASL authentication",
			"✓ PostgreSQL connection: not encrypted, as configured",
			"checks passed, 1 with a warning (!)")
	})

	t.Run("check, sslmode=prefer falls back to plaintext", func(t *testing.T) {
		v := maps.Clone(vars)
		v["CDC_PG_URL"] = withParam(e.pgURL, "sslmode=prefer")
		res := runCDC(t, v, time.Minute, "check")
		assertContains(t, res.out,
			"! PostgreSQL: encrypted only if the server offers TLS, else plaintext; server certificate not verified (sslmode=prefer, the default)",
			"! PostgreSQL connection: not encrypted: the server offered no TLS and sslmode=prefer fell back to plaintext")
	})

	t.Run("check, SASL over plaintext", func(t *testing.T) {
		v := maps.Clone(vars)
		v["CDC_KAFKA_SASL_MECHANISM"] = "PLAIN"
		v["CDC_KAFKA_SASL_USERNAME"] = "alice"
		v["CDC_KAFKA_SASL_PASSWORD"] = secret
		res := runCDC(t, v, time.Minute, "check")
		assertContains(t, res.out, "! Kafka: not encrypted (CDC_KAFKA_TLS=false); SASL PLAIN: the PLAIN credentials cross the network in plaintext",
			"fix: use the brokers' TLS listener")
		assertNoSecret(t, res.out)
	})

	t.Run("CDC_REQUIRE_TLS", func(t *testing.T) {
		v := maps.Clone(vars)
		v["CDC_REQUIRE_TLS"] = "true"
		for _, cmd := range []string{"check", "run"} {
			res := runCDC(t, v, time.Minute, cmd)
			if res.code != 2 {
				t.Errorf("cdc %s: exit %d, want 2", cmd, res.code)
			}
			assertContains(t, res.out, "CDC_PG_URL: CDC_REQUIRE_TLS=true, but PostgreSQL is not encrypted (sslmode=disable)",
				"CDC_KAFKA_TLS: CDC_REQUIRE_TLS=true, but Kafka is not encrypted")
		}
		e.assertClean()
	})

	t.Run("run logs the posture", func(t *testing.T) {
		p := e.startCDC(vars)
		deadline := time.Now().Add(time.Minute)
		for !strings.Contains(p.log.String(), "connection=Kafka") && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		p.stop(syscall.SIGTERM)
		assertContains(t, p.log.String(),
			`level=WARN msg="PostgreSQL: not encrypted (sslmode=disable): data and credentials cross the network in plaintext"`,
			"fix=\"add sslmode=verify-full",
			`level=INFO msg="Kafka: not encrypted (CDC_KAFKA_TLS=false); no SASL authentication" connection=Kafka mode=plaintext`)
	})
}
