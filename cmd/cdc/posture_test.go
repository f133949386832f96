package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/sink"
)

// testCAFile writes a self-signed CA certificate (PEM) and returns its path: pgx reads
// sslrootcert while it parses.
func testCAFile(tb testing.TB) string {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(tb.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

func TestPGPosture(t *testing.T) {
	ca := testCAFile(t)
	tests := []struct {
		name, conn                string
		mode, encrypted, verified string
		warn                      bool
	}{
		{"disable", "postgres://db.example/app?sslmode=disable", "disable", "never", "none", true},
		{"allow", "postgres://db.example/app?sslmode=allow", "allow", "only if the server insists", "none", true},
		{"prefer", "postgres://db.example/app?sslmode=prefer", "prefer", "if the server offers it", "none", true},
		{"no sslmode is prefer", "postgres://db.example/app", "prefer", "if the server offers it", "none", true},
		{"require", "postgres://db.example/app?sslmode=require", "require", "always", "none", true},
		{"require with sslrootcert verifies the chain", "postgres://db.example/app?sslmode=require&sslrootcert=" + ca, "verify-ca", "always", "chain", true},
		{"verify-ca", "postgres://db.example/app?sslmode=verify-ca&sslrootcert=" + ca, "verify-ca", "always", "chain", true},
		{"verify-full", "postgres://db.example/app?sslmode=verify-full&sslrootcert=" + ca, "verify-full", "always", "full", false},
		{"verify-full, system roots", "postgres://db.example/app?sslrootcert=system", "verify-full", "always", "full", false},
		{"key=value verify-full", "host=db.example dbname=app sslmode=verify-full sslrootcert=" + ca, "verify-full", "always", "full", false},
		{"two hosts, prefer", "postgres://db1.example,db2.example/app", "prefer", "if the server offers it", "none", true},
		{"two hosts, verify-full", "postgres://db1.example,db2.example/app?sslmode=verify-full&sslrootcert=" + ca, "verify-full", "always", "full", false},
		{"unix socket", "host=/var/run/postgresql dbname=app", "socket", "never", "none", false},
		{"socket and network host", "host=/var/run/postgresql,db.example dbname=app sslmode=prefer", "prefer", "if the server offers it", "none", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := pgconn.ParseConfig(tt.conn)
			if err != nil {
				t.Fatal(err)
			}
			p := pgPosture(cfg)
			if p.Mode != tt.mode || p.Encrypted != tt.encrypted || p.Verified != tt.verified {
				t.Errorf("posture %s/%s/%s, want %s/%s/%s", p.Mode, p.Encrypted, p.Verified, tt.mode, tt.encrypted, tt.verified)
			}
			if (p.Warning != "") != tt.warn {
				t.Errorf("warning %q, want one: %v", p.Warning, tt.warn)
			}
			if tt.warn && !strings.Contains(p.Fix, "sslmode=verify-full") {
				t.Errorf("fix %q does not name sslmode=verify-full", p.Fix)
			}
			if !strings.Contains(p.Summary, tt.mode) && tt.mode != "socket" {
				t.Errorf("summary %q does not name %s", p.Summary, tt.mode)
			}
		})
	}
}

func TestKafkaPosture(t *testing.T) {
	tests := []struct {
		name      string
		sec       sink.Security
		mode      string
		warn      bool
		wantInSum string
	}{
		{"plaintext, no SASL", sink.Security{}, "plaintext", false, "not encrypted"},
		{"plaintext, PLAIN", sink.Security{SASLMechanism: sink.SASLPlain, Username: "u", Password: "p"}, "plaintext", true, "SASL PLAIN"},
		{"plaintext, SCRAM", sink.Security{SASLMechanism: sink.SASLScramSHA512, Username: "u", Password: "p"}, "plaintext", true, "SASL SCRAM-SHA-512"},
		{"plaintext, OAUTHBEARER", sink.Security{SASLMechanism: sink.SASLOAuthBearer, Token: "t"}, "plaintext", true, "SASL OAUTHBEARER"},
		{"TLS, system roots", sink.Security{TLS: true}, "tls", false, "verified against the system roots"},
		{"TLS with CA and SCRAM", sink.Security{TLS: true, CAFile: "/ca.pem", SASLMechanism: sink.SASLScramSHA256}, "tls", false, "CDC_KAFKA_TLS_CA_FILE"},
		{"TLS with server name", sink.Security{TLS: true, ServerName: "kafka.internal"}, "tls", false, "for kafka.internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := kafkaPosture(tt.sec)
			if p.Mode != tt.mode || (p.Warning != "") != tt.warn || !strings.Contains(p.Summary, tt.wantInSum) {
				t.Errorf("posture %+v; want mode %s, warning %v, summary with %q", p, tt.mode, tt.warn, tt.wantInSum)
			}
			if p.Mode == "plaintext" && (!p.Required || p.Fix == "") {
				t.Errorf("plaintext Kafka is not refused by CDC_REQUIRE_TLS or has no fix: %+v", p)
			}
		})
	}
}

func TestLoadConfigRequireTLS(t *testing.T) {
	ca := testCAFile(t)
	verified := "postgres://cdc:" + testPassword + "@db.example/app?sslmode=verify-full&sslrootcert=" + ca
	tests := []struct {
		name string
		set  map[string]string
		want []string // variables reported; none: valid
	}{
		{"everything verified", map[string]string{"CDC_PG_URL": verified, "CDC_KAFKA_TLS": "true"}, nil},
		{"local socket", map[string]string{"CDC_PG_URL": "host=/var/run/postgresql dbname=app", "CDC_KAFKA_TLS": "true"}, nil},
		{"PostgreSQL prefer", map[string]string{"CDC_KAFKA_TLS": "true"}, []string{"CDC_PG_URL"}},
		{"PostgreSQL require", map[string]string{"CDC_PG_URL": "postgres://db.example/app?sslmode=require", "CDC_KAFKA_TLS": "true"}, []string{"CDC_PG_URL"}},
		{"PostgreSQL verify-ca", map[string]string{"CDC_PG_URL": "postgres://db.example/app?sslmode=verify-ca&sslrootcert=" + ca, "CDC_KAFKA_TLS": "true"}, []string{"CDC_PG_URL"}},
		{"Kafka plaintext", map[string]string{"CDC_PG_URL": verified}, []string{"CDC_KAFKA_TLS"}},
		{"Kafka SASL over plaintext", map[string]string{"CDC_PG_URL": verified, "CDC_KAFKA_SASL_MECHANISM": "PLAIN",
			"CDC_KAFKA_SASL_USERNAME": "u", "CDC_KAFKA_SASL_PASSWORD": "p"}, []string{"CDC_KAFKA_SASL_MECHANISM"}},
		{"both", map[string]string{"CDC_PG_URL": "postgres://db.example/app?sslmode=disable"}, []string{"CDC_PG_URL", "CDC_KAFKA_TLS"}},
		{"not a boolean", map[string]string{"CDC_PG_URL": verified, "CDC_KAFKA_TLS": "true", "CDC_REQUIRE_TLS": "maybe"}, []string{"CDC_REQUIRE_TLS"}},
		{"primary verified", map[string]string{"CDC_PG_URL": verified, "CDC_PG_PRIMARY_URL": verified, "CDC_KAFKA_TLS": "true"}, nil},
		{"primary plaintext", map[string]string{"CDC_PG_URL": verified, "CDC_PG_PRIMARY_URL": "postgres://primary.example/app?sslmode=disable", "CDC_KAFKA_TLS": "true"}, []string{"CDC_PG_PRIMARY_URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := with(validEnv(), tt.set)
			if _, ok := tt.set["CDC_REQUIRE_TLS"]; !ok {
				m["CDC_REQUIRE_TLS"] = "true"
			}
			_, err := load(t, m)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("LoadConfig: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			if got := problemVars(t, err); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("problems with %v, want %v:\n%v", got, tt.want, err)
			}
			if tt.name != "not a boolean" && !strings.Contains(err.Error(), "CDC_REQUIRE_TLS=true, but") {
				t.Errorf("error does not say why:\n%v", err)
			}
			if strings.Contains(err.Error(), testPassword) {
				t.Errorf("error shows the password:\n%v", err)
			}
		})
	}
	// Without CDC_REQUIRE_TLS the same postures are warnings only, kept in Settings.
	s, err := load(t, validEnv())
	if err != nil {
		t.Fatalf("LoadConfig: %v", err)
	}
	if len(s.TLS) != 2 || s.TLS[0].Mode != "prefer" || s.TLS[0].Warning == "" || s.TLS[1].Mode != "plaintext" {
		t.Errorf("postures %+v; want PostgreSQL prefer with a warning, then Kafka plaintext", s.TLS)
	}
}

func TestLogPostures(t *testing.T) {
	s, err := load(t, with(validEnv(), map[string]string{"CDC_KAFKA_SASL_MECHANISM": "PLAIN", "CDC_KAFKA_SASL_USERNAME": "u", "CDC_KAFKA_SASL_PASSWORD": testPassword}))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logPostures(slog.New(slog.NewTextHandler(&buf, nil)), s.TLS)
	out := buf.String()
	for _, want := range []string{"level=WARN msg=\"PostgreSQL: encrypted only if the server offers TLS", "sslmode=verify-full",
		"level=WARN msg=\"Kafka: not encrypted (CDC_KAFKA_TLS=false); SASL PLAIN: the PLAIN credentials cross the network in plaintext"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, testPassword) {
		t.Errorf("log shows the password:\n%s", out)
	}
}
