package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testToken is a well-formed admin token.
const testToken = "test-token-0123456789abcdef"

func TestLoadConfigHTTP(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	good := file("token", "\n  "+testToken+"\n")
	tests := []struct {
		name      string
		vars      map[string]string
		wantErr   []string // variables named by the problems
		wantToken bool
		wantPprof bool
		wantIdle  time.Duration
	}{
		{name: "defaults", wantIdle: time.Minute},
		{name: "token", vars: map[string]string{"CDC_HTTP_TOKEN": testToken}, wantToken: true, wantIdle: time.Minute},
		{name: "token file", vars: map[string]string{"CDC_HTTP_TOKEN_FILE": good}, wantToken: true, wantIdle: time.Minute},
		{name: "pprof", vars: map[string]string{"CDC_HTTP_TOKEN": testToken, "CDC_HTTP_PPROF": "true", "CDC_HTTP_ADDR": "127.0.0.1:9187",
			"CDC_HTTP_IDLE_TIMEOUT": "5s"}, wantToken: true, wantPprof: true, wantIdle: 5 * time.Second},
		{name: "short token", vars: map[string]string{"CDC_HTTP_TOKEN": "short"}, wantErr: []string{"CDC_HTTP_TOKEN"}},
		{name: "token with a space", vars: map[string]string{"CDC_HTTP_TOKEN": "abcdefgh ijklmnopq"}, wantErr: []string{"CDC_HTTP_TOKEN"}},
		{name: "token with an escape", vars: map[string]string{"CDC_HTTP_TOKEN": "abcdefgh\x1bijklmnopq"}, wantErr: []string{"CDC_HTTP_TOKEN"}},
		{name: "both", vars: map[string]string{"CDC_HTTP_TOKEN": testToken, "CDC_HTTP_TOKEN_FILE": good}, wantErr: []string{"CDC_HTTP_TOKEN_FILE"}},
		{name: "missing file", vars: map[string]string{"CDC_HTTP_TOKEN_FILE": filepath.Join(dir, "nope")}, wantErr: []string{"CDC_HTTP_TOKEN_FILE"}},
		{name: "empty file", vars: map[string]string{"CDC_HTTP_TOKEN_FILE": file("empty", "\n")}, wantErr: []string{"CDC_HTTP_TOKEN_FILE"}},
		{name: "fifo", vars: map[string]string{"CDC_HTTP_TOKEN_FILE": fifo}, wantErr: []string{"CDC_HTTP_TOKEN_FILE"}},
		{name: "directory", vars: map[string]string{"CDC_HTTP_TOKEN_FILE": dir}, wantErr: []string{"CDC_HTTP_TOKEN_FILE"}},
		{name: "large file", vars: map[string]string{"CDC_HTTP_TOKEN_FILE": file("large", strings.Repeat("a", 5000))}, wantErr: []string{"CDC_HTTP_TOKEN_FILE"}},
		{name: "pprof without token or address", vars: map[string]string{"CDC_HTTP_PPROF": "true"}, wantErr: []string{"CDC_HTTP_PPROF", "CDC_HTTP_PPROF"}},
		{name: "pprof bad", vars: map[string]string{"CDC_HTTP_PPROF": "maybe"}, wantErr: []string{"CDC_HTTP_PPROF"}},
		{name: "idle timeout", vars: map[string]string{"CDC_HTTP_IDLE_TIMEOUT": "10ms"}, wantErr: []string{"CDC_HTTP_IDLE_TIMEOUT"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			var s Settings
			var err error
			go func() {
				defer close(done)
				s, err = load(t, with(validEnv(), tc.vars))
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("LoadConfig hangs")
			}
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("LoadConfig accepted %v", tc.vars)
				}
				if got := problemVars(t, err); !slices.Equal(got, tc.wantErr) {
					t.Errorf("problems with %v, want %v: %v", got, tc.wantErr, err)
				}
				if strings.Contains(err.Error(), testToken) {
					t.Errorf("the problem shows the token: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			h := s.HTTP
			if h.Token.IsSet() != tc.wantToken || h.Pprof != tc.wantPprof || h.IdleTimeout != tc.wantIdle {
				t.Errorf("got token %v pprof %v idle %v; want %v %v %v", h.Token.IsSet(), h.Pprof, h.IdleTimeout, tc.wantToken, tc.wantPprof, tc.wantIdle)
			}
			if tc.wantToken && !h.Token.Matches(testToken) {
				t.Error("the token read does not match the one configured")
			}
			var logged bytes.Buffer
			slog.New(slog.NewJSONHandler(&logged, nil)).Info("starting", "config", s)
			if strings.Contains(logged.String(), testToken) {
				t.Errorf("the configuration log line shows the token: %s", logged.String())
			}
		})
	}
}
