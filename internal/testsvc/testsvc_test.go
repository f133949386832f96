package testsvc

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWithDatabase(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "plain", in: "postgres://postgres@127.0.0.1:5432/tidemark?sslmode=disable",
			want: "postgres://postgres@127.0.0.1:5432/x?sslmode=disable"},
		{name: "password kept", in: "postgresql://u:p%40ss@h:1/db", want: "postgresql://u:p%40ss@h:1/x"},
		{name: "no path", in: "postgres://u@h:1", want: "postgres://u@h:1/x"},
		{name: "not a url", in: "host=h dbname=db", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WithDatabase(tc.in, "x")
			if tc.wantErr {
				if err == nil {
					t.Fatalf("WithDatabase(%q) = %q, want error", tc.in, got)
				}
				if strings.Contains(err.Error(), "p%40ss") {
					t.Errorf("error leaks the password: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("WithDatabase(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestFreePortsDistinct(t *testing.T) {
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 3 || ports[0] == ports[1] || ports[1] == ports[2] || ports[0] == ports[2] {
		t.Errorf("FreePorts(3) = %v, want 3 distinct ports", ports)
	}
}

func TestWriteProperties(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.properties")
	if err := WriteProperties(p, map[string]string{"b": `C:\x`, "a": "1"}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a=1\nb=C:\\\\x\n"; string(got) != want {
		t.Errorf("properties = %q, want %q", got, want)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600: the file may hold a password", st.Mode().Perm(), err)
	}
}

// The reach lines compare 10x Debezium's best profile with the read limit and with the
// servers' CPU per row, and say which side of each it falls.

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		wantPG      string
		wantBrokers []string
		wantErr     bool
	}{
		{name: "unset"},
		{name: "both", env: map[string]string{EnvPGURL: " postgres://u@h:1/db ", EnvBrokers: " a:1, b:2 ,"},
			wantPG: "postgres://u@h:1/db", wantBrokers: []string{"a:1", "b:2"}},
		{name: "only url", env: map[string]string{EnvPGURL: "postgres://u@h:1/db"}, wantErr: true},
		{name: "only brokers", env: map[string]string{EnvBrokers: "a:1"}, wantErr: true},
		{name: "blank brokers", env: map[string]string{EnvPGURL: "postgres://u@h:1/db", EnvBrokers: " , "}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pg, brokers, err := FromEnv(func(k string) string { return tc.env[k] })
			if (err != nil) != tc.wantErr {
				t.Fatalf("FromEnv() error = %v, want error %v", err, tc.wantErr)
			}
			if pg != tc.wantPG || !slices.Equal(brokers, tc.wantBrokers) {
				t.Errorf("FromEnv() = %q, %q; want %q, %q", pg, brokers, tc.wantPG, tc.wantBrokers)
			}
		})
	}
}

func TestConnectorStatus(t *testing.T) {
	var s ConnectorStatus
	s.Connector.State = "RUNNING"
	if s.Running() {
		t.Error("Running() with no task = true, want false")
	}
	s.Tasks = make([]struct {
		ID    int    `json:"id"`
		State string `json:"state"`
		Trace string `json:"trace"`
	}, 2)
	s.Tasks[0].State, s.Tasks[1].State = "RUNNING", "FAILED"
	s.Tasks[1].Trace = "org.postgresql.util.PSQLException: boom"
	if s.Running() {
		t.Error("Running() with a FAILED task = true, want false")
	}
	err := s.Failed("dbz")
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("Failed() = %v, want the task's trace", err)
	}
	s.Tasks[1].State = "RUNNING"
	if !s.Running() || s.Failed("dbz") != nil {
		t.Errorf("all RUNNING: Running() = %v, Failed() = %v", s.Running(), s.Failed("dbz"))
	}
}

func TestRepoRootHasServicesScript(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "scripts", "services.sh")); errors.Is(err, os.ErrNotExist) {
		t.Errorf("RepoRoot() = %s, which has no scripts/services.sh", root)
	}
}
