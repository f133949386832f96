package posture

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

	"github.com/tidemark/cdc/pkg/kafkaconn"
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
			p := PG(cfg, "PostgreSQL", "CDC_PG_URL")
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
		sec       kafkaconn.Security
		mode      string
		warn      bool
		wantInSum string
	}{
		{"plaintext, no SASL", kafkaconn.Security{}, "plaintext", false, "not encrypted"},
		{"plaintext, PLAIN", kafkaconn.Security{SASLMechanism: kafkaconn.SASLPlain, Username: "u", Password: "p"}, "plaintext", true, "SASL PLAIN"},
		{"plaintext, SCRAM", kafkaconn.Security{SASLMechanism: kafkaconn.SASLScramSHA512, Username: "u", Password: "p"}, "plaintext", true, "SASL SCRAM-SHA-512"},
		{"plaintext, OAUTHBEARER", kafkaconn.Security{SASLMechanism: kafkaconn.SASLOAuthBearer, Token: "t"}, "plaintext", true, "SASL OAUTHBEARER"},
		{"TLS, system roots", kafkaconn.Security{TLS: true}, "tls", false, "verified against the system roots"},
		{"TLS with CA and SCRAM", kafkaconn.Security{TLS: true, CAFile: "/ca.pem", SASLMechanism: kafkaconn.SASLScramSHA256}, "tls", false, "CDC_KAFKA_TLS_CA_FILE"},
		{"TLS with server name", kafkaconn.Security{TLS: true, ServerName: "kafka.internal"}, "tls", false, "for kafka.internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Kafka(tt.sec)
			if p.Mode != tt.mode || (p.Warning != "") != tt.warn || !strings.Contains(p.Summary, tt.wantInSum) {
				t.Errorf("posture %+v; want mode %s, warning %v, summary with %q", p, tt.mode, tt.warn, tt.wantInSum)
			}
			if p.Mode == "plaintext" && (!p.Required || p.Fix == "") {
				t.Errorf("plaintext Kafka is not refused by CDC_REQUIRE_TLS or has no fix: %+v", p)
			}
		})
	}
}

func TestLoopback(t *testing.T) {
	tests := []struct {
		conn string
		want bool
	}{
		{"postgres://127.0.0.1:5432/app", true},
		{"postgres://localhost/app", true},
		{"postgres://[::1]:5432/app", true},
		{"host=/var/run/postgresql dbname=app", true},
		{"host=/var/run/postgresql,127.0.0.1 dbname=app", true},
		{"postgres://db.example/app", false},
		{"postgres://127.0.0.1,db.example/app", false},
		{"postgres://10.0.0.1/app", false},
	}
	for _, tt := range tests {
		t.Run(tt.conn, func(t *testing.T) {
			cfg, err := pgconn.ParseConfig(tt.conn)
			if err != nil {
				t.Fatal(err)
			}
			if got := Loopback(cfg); got != tt.want {
				t.Errorf("Loopback = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRefused(t *testing.T) {
	tests := []struct {
		name string
		p    Posture
		want string // "" when accepted
	}{
		{"verified", Posture{Conn: "PostgreSQL", Summary: "PostgreSQL: encrypted, certificate and host name verified (sslmode=verify-full)"}, ""},
		{"warning", Posture{Conn: "target PostgreSQL", Summary: "target PostgreSQL: not encrypted (sslmode=disable)", Warning: "plaintext", Fix: "add sslmode"},
			"APPLY_REQUIRE_TLS=true, but target PostgreSQL is not encrypted (sslmode=disable): plaintext; fix: add sslmode"},
		{"required without warning", Posture{Conn: "Kafka", Summary: "Kafka: not encrypted (CDC_KAFKA_TLS=false); no SASL authentication", Required: true, Fix: "use TLS"},
			"APPLY_REQUIRE_TLS=true, but Kafka is not encrypted (CDC_KAFKA_TLS=false); no SASL authentication; fix: use TLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Refused(tt.p, "APPLY_REQUIRE_TLS"); got != tt.want {
				t.Errorf("Refused = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLog(t *testing.T) {
	cfg, err := pgconn.ParseConfig("postgres://u:hunter2@db.example/app")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	Log(slog.New(slog.NewTextHandler(&buf, nil)), []Posture{PG(cfg, "target PostgreSQL", "APPLY_TARGET_URL"), Kafka(kafkaconn.Security{TLS: true})})
	out := buf.String()
	for _, want := range []string{`level=WARN msg="target PostgreSQL: encrypted only if the server offers TLS`, "fix=\"add sslmode=verify-full and sslrootcert=<CA file> to APPLY_TARGET_URL",
		`level=INFO msg="Kafka: encrypted`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("log shows the password:\n%s", out)
	}
}
