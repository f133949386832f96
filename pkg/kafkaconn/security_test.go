package kafkaconn

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestSecurityClientOpts(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("  tok-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A FIFO or a device must be refused, not waited on (the test would hang).
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		s    Security
		want string // "" = no error
	}{
		{"plaintext", Security{}, ""},
		{"TLS with system roots", Security{TLS: true}, ""},
		{"CA file without certificates", Security{TLS: true, CAFile: notPEM}, "holds no PEM certificate"},
		{"missing CA file", Security{TLS: true, CAFile: filepath.Join(dir, "nope")}, "no such file"},
		{"client certificate that does not load", Security{TLS: true, CertFile: notPEM, KeyFile: notPEM}, "client certificate"},
		{"SCRAM", Security{SASLMechanism: SASLScramSHA512, Username: "u", Password: "p"}, ""},
		{"OAUTHBEARER file", Security{SASLMechanism: SASLOAuthBearer, TokenFile: token}, ""},
		{"OAUTHBEARER missing file", Security{SASLMechanism: SASLOAuthBearer, TokenFile: filepath.Join(dir, "nope")}, "token file"},
		{"unknown mechanism", Security{SASLMechanism: "GSSAPI"}, "unknown SASL mechanism"},
		{"CA file a FIFO", Security{TLS: true, CAFile: fifo}, fifo + " is a named pipe, not a regular file"},
		{"client key a FIFO", Security{TLS: true, CertFile: notPEM, KeyFile: fifo}, "is a named pipe"},
		{"client certificate a device", Security{TLS: true, CertFile: "/dev/zero", KeyFile: notPEM}, "/dev/zero is a character device"},
		{"token file a FIFO", Security{SASLMechanism: SASLOAuthBearer, TokenFile: fifo}, "is a named pipe"},
	} {
		_, err := tc.s.ClientOpts()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
}

// The token file is read again when it changes, and only then.
func TestTokenFileRereads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &tokenFile{path: path}
	if tok, err := f.token(); err != nil || tok != "first" {
		t.Fatalf("token = %q, %v", tok, err)
	}
	if err := os.WriteFile(path, []byte("second-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := f.token(); err != nil || tok != "second-token" {
		t.Fatalf("after a rotation: token = %q, %v", tok, err)
	}
}

func TestExplainConnect(t *testing.T) {
	s := Security{SASLMechanism: SASLScramSHA512, Username: "bob", Password: "hunter2"}
	err := s.explainConnect(kerr.SaslAuthenticationFailed)
	if !strings.Contains(err.Error(), "CDC_KAFKA_SASL_PASSWORD") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("explained: %v", err)
	}
	other := errors.New("connection refused")
	if s.explainConnect(other) != other {
		t.Error("an unrelated error was rewritten")
	}
}
