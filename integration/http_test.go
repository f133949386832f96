package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// httpToken is the admin token the HTTP tests configure.
const httpToken = "it-admin-token-5f2d8c1e9a7b"

// httpCall sends one request to cdc's HTTP endpoints and returns the status and body.
func httpCall(t testing.TB, method, url string, header map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// exportAttempt returns the snapshot attempt and state of one table from /exports (with the
// token: the state is the same without it).
func exportAttempt(t testing.TB, base, table string) (int, string) {
	t.Helper()
	code, body := httpCall(t, http.MethodGet, base+"/exports", map[string]string{"Authorization": "Bearer " + httpToken}, "")
	var exports []struct {
		Export  string `json:"export"`
		State   string `json:"state"`
		Attempt int    `json:"snapshot_attempt"`
	}
	if err := json.Unmarshal([]byte(body), &exports); code != http.StatusOK || err != nil {
		t.Fatalf("/exports: %d %v: %s", code, err, body)
	}
	for _, x := range exports {
		if x.Export == table {
			return x.Attempt, x.State
		}
	}
	t.Fatalf("/exports does not list %s: %s", table, body)
	return 0, ""
}

// TestHTTPSurface runs cdc with an admin token and checks its HTTP endpoints from outside:
//
//   - a re-copy without the token is 401, and a cross-site form POST (the request any web page
//     can make a browser send) is refused; neither starts a copy. With the token (cdc
//     resnapshot) it works;
//   - pprof is 404 when CDC_HTTP_PPROF is not set, token or not;
//   - an idle keep-alive connection is closed by the server within CDC_HTTP_IDLE_TIMEOUT;
//   - after a table fails on a value that quotes row data (a point with NaN in
//     json-with-schema), no endpoint shows that value without the token; /exports shows it
//     with the token.
func TestHTTPSurface(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	const secretValue = "31337.777"
	e.exec(
		`CREATE TABLE places (id int PRIMARY KEY, p point)`,
		`CREATE TABLE fine (id int PRIMARY KEY, v text)`,
		`INSERT INTO places VALUES (1, '(1,2)')`,
		`INSERT INTO fine VALUES (1, 'one')`,
	)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.places,public.fine"
	vars["CDC_VALUE_FORMAT"] = "json-with-schema"
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	vars["CDC_HTTP_TOKEN"] = httpToken
	vars["CDC_HTTP_IDLE_TIMEOUT"] = "1s"
	p := e.startCDC(vars)
	base := "http://" + vars["CDC_HTTP_ADDR"]
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.places", "public.fine")
	recopy := base + "/exports/public.fine/resnapshot"

	t.Run("re-copy needs the token and a non-simple request", func(t *testing.T) {
		before, _ := exportAttempt(t, base, "public.fine")
		refused := []struct {
			name   string
			header map[string]string
			body   string
			want   int
		}{
			{"no token", map[string]string{"Content-Type": "application/json"}, "{}", http.StatusUnauthorized},
			{"wrong token", map[string]string{"Content-Type": "application/json", "Authorization": "Bearer not-" + httpToken}, "{}", http.StatusUnauthorized},
			{"cross-site form", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "https://evil.example",
				"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, "a=1", http.StatusForbidden},
			{"form without Origin", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, "a=1", http.StatusUnauthorized},
			{"text/plain (a no-cors fetch)", map[string]string{"Content-Type": "text/plain"}, "{}", http.StatusUnauthorized},
			{"form with the token", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Authorization": "Bearer " + httpToken}, "a=1",
				http.StatusUnsupportedMediaType},
			{"cross-site with the token", map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + httpToken,
				"Origin": "https://evil.example"}, "{}", http.StatusForbidden},
		}
		for _, tc := range refused {
			code, body := httpCall(t, http.MethodPost, recopy, tc.header, tc.body)
			if code != tc.want {
				t.Errorf("%s: %d %q, want %d", tc.name, code, body, tc.want)
			}
			if strings.Contains(body, httpToken) {
				t.Errorf("%s: the answer shows the token", tc.name)
			}
		}
		if code, _ := httpCall(t, http.MethodGet, recopy, nil, ""); code != http.StatusMethodNotAllowed {
			t.Errorf("GET of the re-copy endpoint: %d, want 405", code)
		}
		if after, state := exportAttempt(t, base, "public.fine"); after != before || state != "hydrated" {
			t.Fatalf("after the refused requests public.fine is at attempt %d (%s), was %d: a refused request started a copy", after, state, before)
		}
		// cdc resnapshot with the token in its environment.
		cmd := exec.Command(cdcBinary, "resnapshot", "public.fine")
		cmd.Env = []string{"CDC_HTTP_ADDR=" + vars["CDC_HTTP_ADDR"], "CDC_HTTP_TOKEN=" + httpToken}
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "re-copy of public.fine started") {
			t.Fatalf("cdc resnapshot with the token: %v: %s", err, out)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			after, _ := exportAttempt(t, base, "public.fine")
			if after == before+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a minute after cdc resnapshot public.fine is at attempt %d, want %d", after, before+1)
			}
		}
		e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.fine")
	})

	t.Run("pprof is off by default", func(t *testing.T) {
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline", "/debug/pprof/profile?seconds=1"} {
			for _, auth := range []string{"", "Bearer " + httpToken} {
				code, body := httpCall(t, http.MethodGet, base+path, map[string]string{"Authorization": auth}, "")
				if code != http.StatusNotFound {
					t.Errorf("GET %s (authorization %v): %d %.100q, want 404", path, auth != "", code, body)
				}
			}
		}
	})

	t.Run("idle connection closed", func(t *testing.T) {
		conn, err := net.Dial("tcp", vars["CDC_HTTP_ADDR"])
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", vars["CDC_HTTP_ADDR"])
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("keep-alive GET /healthz: %d, close %v", resp.StatusCode, resp.Close)
		}
		// The idle timeout is 1 s; 20 s is the bound of the test on a loaded machine.
		start := time.Now()
		_ = conn.SetReadDeadline(start.Add(20 * time.Second))
		n, err := br.Read(make([]byte, 1))
		if err != io.EOF {
			t.Fatalf("idle connection after %s: read %d bytes, %v; want it closed by cdc (EOF)", time.Since(start).Round(time.Millisecond), n, err)
		}
		t.Logf("cdc closed the idle connection after %s (CDC_HTTP_IDLE_TIMEOUT=1s)", time.Since(start).Round(time.Millisecond))
	})

	t.Run("no row data without the token", func(t *testing.T) {
		e.exec(fmt.Sprintf(`INSERT INTO places VALUES (2, '(%s,NaN)')`, secretValue))
		deadline := time.Now().Add(90 * time.Second)
		for {
			code, body := httpCall(t, http.MethodGet, base+"/readyz", nil, "")
			if code == http.StatusServiceUnavailable && strings.Contains(body, "public.places failed") {
				t.Logf("/readyz without the token: %s", strings.TrimSpace(body))
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("public.places did not fail within 90s: /readyz %d %s", code, body)
			}
			time.Sleep(300 * time.Millisecond)
		}
		// With the token the full text quotes the value: it is there to leak.
		if code, body := httpCall(t, http.MethodGet, base+"/exports", map[string]string{"Authorization": "Bearer " + httpToken}, ""); code != http.StatusOK ||
			!strings.Contains(body, secretValue) {
			t.Fatalf("/exports with the token: %d %s; want the error text with the value", code, body)
		}
		anon := []struct{ method, path, ctype string }{
			{"GET", "/healthz", ""}, {"GET", "/readyz", ""}, {"GET", "/exports", ""}, {"GET", "/metrics", ""},
			{"GET", "/debug/pprof/", ""}, {"GET", "/exports/public.places", ""}, {"GET", "/", ""},
			{"POST", "/exports/public.places/resnapshot", "application/json"},
			{"POST", "/exports/public.places/resnapshot", "application/x-www-form-urlencoded"},
		}
		for _, a := range anon {
			code, body := httpCall(t, a.method, base+a.path, map[string]string{"Content-Type": a.ctype}, "")
			if strings.Contains(body, secretValue) {
				t.Errorf("%s %s without the token (%d) shows the row value: %.300s", a.method, a.path, code, body)
			}
		}
		_, body := httpCall(t, http.MethodGet, base+"/exports", nil, "")
		if !strings.Contains(body, "a value cannot be represented in json-with-schema (the full text needs the admin token)") {
			t.Errorf("/exports without the token does not name the error class: %s", body)
		}
	})
}
