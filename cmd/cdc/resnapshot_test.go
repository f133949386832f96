package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestResnapshotCommand(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.EscapedPath()+" "+r.Header.Get("Content-Type")+" "+r.Header.Get("Authorization"))
		if strings.Contains(r.URL.Path, "nosuch") {
			http.Error(w, "public.nosuch: not an exported table", http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		w.Write([]byte("re-copy of public.\"Order\" started\n"))
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	env := func(k string) string {
		switch k {
		case "CDC_HTTP_ADDR":
			return addr
		case "CDC_HTTP_TOKEN":
			return testToken
		}
		return ""
	}
	tests := []struct {
		name   string
		args   []string
		getenv func(string) string
		code   int
		out    string
	}{
		{"accepted", []string{"resnapshot", `public."Order"`}, env, exitOK, "started"},
		{"unknown table", []string{"resnapshot", "public.nosuch"}, env, exitFailed, "404"},
		{"no table", []string{"resnapshot"}, env, exitConfig, "want one table"},
		{"bad name", []string{"resnapshot", `"open`}, env, exitConfig, "unterminated"},
		{"no address", []string{"resnapshot", "public.t"}, func(string) string { return "" }, exitConfig, "CDC_HTTP_ADDR"},
		{"two tokens", []string{"resnapshot", "public.t"}, func(k string) string {
			return map[string]string{"CDC_HTTP_ADDR": addr,
				"CDC_HTTP_TOKEN": testToken, "CDC_HTTP_TOKEN_FILE": "/x"}[k]
		}, exitConfig, "both set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(t.Context(), tt.args, tt.getenv, nil, &stdout, &stderr)
			if code != tt.code || !strings.Contains(stdout.String()+stderr.String(), tt.out) {
				t.Fatalf("exit %d, output %q%q; want exit %d and %q", code, stdout.String(), stderr.String(), tt.code, tt.out)
			}
		})
	}
	if len(got) < 1 || got[0] != `POST /exports/public.%22Order%22/resnapshot application/json Bearer `+testToken {
		t.Errorf("requests %q", got)
	}
}
