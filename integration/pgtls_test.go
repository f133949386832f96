package integration

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testenv"
)

// TestPostgresTLS runs cdc against a PostgreSQL with ssl=on whose pg_hba.conf accepts only TLS
// (hostssl) for normal and replication connections, with a certificate for "localhost" signed
// by a throwaway CA. With sslmode=verify-full and the right CA, the replication connection and
// every snapshot connection are verified and data flows; a wrong host name and an unknown CA
// each stop cdc at start-up with one sentence saying what to fix.
func TestPostgresTLS(t *testing.T) {
	brokers := testenv.Brokers(t)
	dir := t.TempDir()
	ca, err := testenv.NewTestCA(dir, "pg test CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testenv.NewTestCA(filepath.Join(dir), "other CA")
	if err != nil {
		t.Fatal(err)
	}
	plainURL := startThrowawayPGWith(t, func(data string, own func(string)) {
		cert, key, err := ca.Issue(data, "server", []string{"localhost"}, false)
		if err != nil {
			t.Fatal(err)
		}
		own(cert)
		own(key)
		// cdc logs in as a role with a password (scram); the test's own connections as postgres.
		hba := "local all all trust\n" +
			"hostssl all tidemark_tls 127.0.0.1/32 scram-sha-256\nhostssl replication tidemark_tls 127.0.0.1/32 scram-sha-256\n" +
			"hostssl all all 127.0.0.1/32 trust\nhostssl replication all 127.0.0.1/32 trust\n" +
			"hostnossl all all 0.0.0.0/0 reject\nhostnossl replication all 0.0.0.0/0 reject\n"
		if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
			t.Fatal(err)
		}
		own(filepath.Join(data, "pg_hba.conf"))
	}, "-c", "ssl=on", "-c", "ssl_cert_file=server.pem", "-c", "ssl_key_file=server-key.pem", "-c", "wal_level=logical",
		"-c", "max_replication_slots=10", "-c", "max_wal_senders=10")
	u, err := url.Parse(plainURL)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	password := "pg-secret-" + fmt.Sprint(time.Now().UnixNano())
	admin := fmt.Sprintf("postgres://postgres@localhost:%s/postgres?sslmode=verify-full&sslrootcert=%s", port, ca.File)
	testenv.Exec(t, admin, `CREATE TABLE orders (id int PRIMARY KEY, note text)`,
		`INSERT INTO orders SELECT g, 'row ' || g FROM generate_series(1, 5000) g`,
		fmt.Sprintf(`CREATE ROLE tidemark_tls LOGIN SUPERUSER PASSWORD '%s'`, password))
	tlsURL := func(host, rootCert string) string {
		return fmt.Sprintf("postgres://tidemark_tls:%s@%s:%s/postgres?sslmode=verify-full&sslrootcert=%s", password, host, port, rootCert)
	}
	good := tlsURL("localhost", ca.File)
	// Non-TLS connections are refused: everything below goes over TLS.
	res := runCDC(t, map[string]string{"CDC_PG_URL": strings.Replace(plainURL, "127.0.0.1", "localhost", 1),
		"CDC_KAFKA_BROKERS": strings.Join(brokers, ","), "CDC_TABLES": "public.orders"}, time.Minute)
	if res.code == 0 {
		t.Fatal("cdc connected without TLS to a server that only accepts TLS")
	}

	// cdc check prints each posture and what the connection actually is; only verify-full
	// passes without a warning, and CDC_REQUIRE_TLS accepts it.
	t.Run("check posture", func(t *testing.T) {
		vars := map[string]string{"CDC_PG_URL": good, "CDC_KAFKA_BROKERS": strings.Join(brokers, ","), "CDC_TABLES": "public.orders",
			"CDC_PUBLICATION": "it_pub_check", "CDC_SLOT": "it_pgtls_check"}
		res := runCDC(t, vars, time.Minute, "check")
		assertContains(t, res.out, "✓ PostgreSQL: encrypted, certificate and host name verified (sslmode=verify-full)",
			"✓ PostgreSQL connection: encrypted (TLS 1.3)")
		vars["CDC_PG_URL"] = strings.Replace(good, "verify-full", "require", 1)
		vars["CDC_PG_URL"] = vars["CDC_PG_URL"][:strings.Index(vars["CDC_PG_URL"], "&sslrootcert")]
		res = runCDC(t, vars, time.Minute, "check")
		assertContains(t, res.out, "! PostgreSQL: encrypted, server certificate not verified (sslmode=require): anyone in the path can impersonate the server",
			"fix: add sslmode=verify-full", "✓ PostgreSQL connection: encrypted (TLS 1.3)")
		vars["CDC_REQUIRE_TLS"] = "true"
		res = runCDC(t, vars, time.Minute, "check")
		if res.code != 2 {
			t.Errorf("CDC_REQUIRE_TLS=true with sslmode=require: exit %d, want 2", res.code)
		}
		assertContains(t, res.out, "CDC_PG_URL: CDC_REQUIRE_TLS=true, but PostgreSQL is encrypted, server certificate not verified (sslmode=require)")
		vars["CDC_PG_URL"] = good
		res = runCDC(t, vars, time.Minute, "check")
		if strings.Contains(res.out, "CDC_PG_URL:") || !strings.Contains(res.out, "CDC_KAFKA_TLS: CDC_REQUIRE_TLS=true") {
			t.Errorf("CDC_REQUIRE_TLS=true with verify-full should refuse only the plaintext Kafka connection")
		}
		checkNoSecrets(t, "cdc check's output", res.out, []string{password})
	})

	e := &env{t: t, pgURL: good, brokers: brokers, prefix: fmt.Sprintf("it%d.pgtls", time.Now().UnixNano()%1_000_000), slot: "it_pgtls", pub: "it_pub"}
	for _, strategy := range []string{"chunked", "copy"} {
		t.Run("verify-full "+strategy, func(t *testing.T) {
			e := *e
			e.t = t
			e.prefix += "." + strategy
			e.slot += "_" + strategy
			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.orders"
			vars["CDC_SNAPSHOT_STRATEGY"] = strategy
			vars["CDC_PUBLICATION"] = "it_pub_" + strategy
			vars["CDC_HTTP_ADDR"] = freeAddr(t)
			p := e.startCDC(vars)
			e.waitFor(p, 2*time.Minute, e.currentLSN(t.Context()), "public.orders")
			e.exec(`UPDATE orders SET note = 'changed' WHERE id = 1`)
			e.waitFor(p, 2*time.Minute, e.currentLSN(t.Context()), "public.orders")
			if n := len(e.readTopic(e.topic("public.orders"))); n < 5001 {
				t.Errorf("topic holds %d records, want the 5000 rows and the update", n)
			}
			checkNoSecrets(t, "cdc's output and HTTP endpoints", collectHTTP(t, vars["CDC_HTTP_ADDR"])+p.log.String(), []string{password})
		})
	}

	fails := []struct {
		name, url string
		want      []string
	}{
		{"wrong host name", tlsURL("127.0.0.1", ca.File), []string{"PostgreSQL's TLS certificate is not valid for", "127.0.0.1", "CDC_PG_URL"}},
		{"unknown CA", tlsURL("localhost", other.File), []string{"PostgreSQL's TLS certificate is signed by an authority not in sslrootcert", "CDC_PG_URL"}},
	}
	for _, tc := range fails {
		t.Run(tc.name, func(t *testing.T) {
			res := runCDC(t, map[string]string{"CDC_PG_URL": tc.url, "CDC_KAFKA_BROKERS": strings.Join(brokers, ","),
				"CDC_TABLES": "public.orders", "CDC_LOG_FORMAT": "text"}, time.Minute)
			if res.code == 0 {
				t.Fatalf("cdc started with %s", tc.name)
			}
			assertContains(t, res.out, tc.want...)
			checkNoSecrets(t, "cdc's output", res.out, []string{password})
		})
	}
}
