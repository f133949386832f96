package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestHealthEndpoints: /healthz answers while cdc runs; /readyz is 200 once it streams with every
// table fine and 503, naming the table, after one export failed (an oversized row); /exports
// shows each table's state and watermark; `cdc health ready` follows /readyz.
func TestHealthEndpoints(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE huge (id int PRIMARY KEY, t text, b bytea)`,
		`CREATE TABLE small (id int PRIMARY KEY, v text)`,
		`INSERT INTO huge (id, t) VALUES (1, 'fine')`,
		`INSERT INTO small VALUES (1, 'one')`,
	)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.huge,public.small"
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	p := e.startCDC(vars)
	base := "http://" + vars["CDC_HTTP_ADDR"]
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	healthCmd := func(args ...string) error {
		cmd := exec.Command(cdcBinary, append([]string{"health"}, args...)...)
		cmd.Env = []string{"CDC_HTTP_ADDR=" + vars["CDC_HTTP_ADDR"]}
		return cmd.Run()
	}
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.huge", "public.small")
	waitStatus := func(path string, want int, contains string) string {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			code, body := get(path)
			if code == want && strings.Contains(body, contains) {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %d %s; want %d with %q", path, code, body, want, contains)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	waitStatus("/readyz", http.StatusOK, `"ready":true`)
	if err := healthCmd("ready"); err != nil {
		t.Errorf("cdc health ready while ready: %v", err)
	}
	var exports []struct {
		Export    string  `json:"export"`
		State     string  `json:"state"`
		Phase     string  `json:"phase"`
		Watermark *string `json:"watermark"`
	}
	_, body := get("/exports")
	if err := json.Unmarshal([]byte(body), &exports); err != nil {
		t.Fatalf("/exports: %v: %s", err, body)
	}
	if len(exports) != 2 {
		t.Fatalf("/exports lists %d tables: %s", len(exports), body)
	}
	for _, x := range exports {
		if x.State != "hydrated" || x.Phase != "hydrated" || x.Watermark == nil {
			t.Errorf("/exports: %+v, want hydrated with a watermark", x)
		}
	}

	// An oversized row fails its export alone: not ready, alive.
	e.exec(bigRowSQL("huge", 2, 20, 0))
	body = waitStatus("/readyz", http.StatusServiceUnavailable, "public.huge failed")
	t.Logf("/readyz after the failure: %s", strings.TrimSpace(body))
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz after an export failed: %d", code)
	}
	if err := healthCmd("ready"); err == nil {
		t.Error("cdc health ready succeeded while a table failed")
	}
	if err := healthCmd(); err != nil {
		t.Errorf("cdc health (alive) failed: %v", err)
	}
}
