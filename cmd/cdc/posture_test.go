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
