package schemareg

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEnvConfig(t *testing.T) {
	dir := t.TempDir()
	pemFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(pemFile, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		env  map[string]string
		want []string // names of the variables with problems, in order
	}{
		{"unset", nil, nil},
		{"url only", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "http://registry:8081"}, nil},
		{"basic auth over https with a CA", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://registry/apis/ccompat/v7",
			"CDC_SCHEMA_REGISTRY_USERNAME": "alice", "CDC_SCHEMA_REGISTRY_PASSWORD": "secret",
			"CDC_SCHEMA_REGISTRY_TLS_CA_FILE": pemFile}, nil},
		{"settings without a URL", map[string]string{"CDC_SCHEMA_REGISTRY_USERNAME": "alice", "CDC_SCHEMA_REGISTRY_TLS_CA_FILE": pemFile},
			[]string{"CDC_SCHEMA_REGISTRY_USERNAME", "CDC_SCHEMA_REGISTRY_TLS_CA_FILE"}},
		{"not http", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "kafka://registry"}, []string{"CDC_SCHEMA_REGISTRY_URL"}},
		{"no host", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "http:///apis"}, []string{"CDC_SCHEMA_REGISTRY_URL"}},
		{"user info", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://alice:secret@registry"}, []string{"CDC_SCHEMA_REGISTRY_URL"}},
		{"query", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://registry?x=1"}, []string{"CDC_SCHEMA_REGISTRY_URL"}},
		{"tls settings on http", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "http://registry", "CDC_SCHEMA_REGISTRY_TLS_CA_FILE": pemFile},
			[]string{"CDC_SCHEMA_REGISTRY_URL"}},
		{"user without password", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://registry", "CDC_SCHEMA_REGISTRY_USERNAME": "alice"},
			[]string{"CDC_SCHEMA_REGISTRY_USERNAME"}},
		{"missing CA file", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://registry", "CDC_SCHEMA_REGISTRY_TLS_CA_FILE": missing},
			[]string{"CDC_SCHEMA_REGISTRY_TLS_CA_FILE"}},
		{"cert without key", map[string]string{"CDC_SCHEMA_REGISTRY_URL": "https://registry", "CDC_SCHEMA_REGISTRY_TLS_CERT_FILE": pemFile},
			[]string{"CDC_SCHEMA_REGISTRY_TLS_CERT_FILE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, problems := ReadEnv(func(k string) string { return tt.env[k] }).Config()
			var got []string
			for _, p := range problems {
				got = append(got, p.Name)
				if strings.Contains(p.Error(), "secret") {
					t.Errorf("problem %q quotes the password", p.Error())
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems %v, want on %v", problems, tt.want)
			}
		})
	}
}

func TestConfigNeverShowsThePassword(t *testing.T) {
	cfg := Config{URL: "https://registry", Username: "alice", Password: "hunter2"}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("registry", "config", cfg)
	for _, s := range []string{b.String(), fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg)} {
		if strings.Contains(s, "hunter2") {
			t.Errorf("%q shows the password", s)
		}
		if !strings.Contains(s, "alice") {
			t.Errorf("%q does not show the user", s)
		}
	}
}

func TestWarning(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // part of the warning; "" for none
	}{
		{"https", Config{URL: "https://registry", Password: "x"}, ""},
		{"loopback", Config{URL: "http://127.0.0.1:8081", Password: "x"}, ""},
		{"localhost", Config{URL: "http://localhost:8081"}, ""},
		{"plaintext", Config{URL: "http://registry:8081"}, "schemas cross the network in plaintext"},
		{"plaintext password", Config{URL: "http://registry:8081", Username: "a", Password: "x"}, "password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.cfg.Warning()
			if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
				t.Errorf("Warning() = %q, want %q", got, tt.want)
			}
		})
	}
}
