package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tidemark/cdc/internal/testenv"
)

// statusSmallTables is how many small tables sit beside the big one, the two streaming ones
// and the one forced to fail: 1,000 in all.
const statusSmallTables = 996

// TestStatusPage drives the status page (GET /) in headless Chromium against a running cdc
// that exports 1,000 tables: 996 small ones, two that stream all along, one forced to fail
// (a point with NaN cannot be written in json-with-schema), and a 1,000,000-row table added to
// the publication while the others stream, copied at 50,000 rows/s. It checks what an
// operator reads on the page:
//
//   - the big table's progress bar grows between two reads and reaches 100% once hydrated;
//   - the failed table shows as failed, with its reason: the error class without the token,
//     the full text (which quotes the value) once the token is entered on the page;
//   - the page lists 1,000 tables, problems first, and its filter box narrows them;
//   - a streaming table has a lag chart, and the page's re-copy button starts a copy.
//
// Screenshots go to $CDC_TEST_ARTIFACTS (default integration/artifacts/TestStatusPage).
func TestStatusPage(t *testing.T) {
	browser := chromiumPath(t)
	e := newEnv(t)
	e.prefix = testenv.NewTopicPrefix(t) // deletes the 1,000 topics at the end
	const secretValue = "27182.818"

	e.exec(
		`CREATE TABLE stream_a (id bigserial PRIMARY KEY, v text)`,
		`CREATE TABLE stream_b (id bigserial PRIMARY KEY, v text)`,
		`CREATE TABLE places (id int PRIMARY KEY, p point)`,
		`INSERT INTO places VALUES (1, '(1,2)')`,
		fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP
			EXECUTE format('CREATE TABLE %%I (id int PRIMARY KEY, v text)', 't' || lpad(i::text, 4, '0'));
			EXECUTE format('INSERT INTO %%I VALUES (1, %%L)', 't' || lpad(i::text, 4, '0'), 'row ' || i);
		END LOOP; END $$`, statusSmallTables),
		`DO $$ BEGIN EXECUTE 'CREATE PUBLICATION it_pub FOR TABLE ' ||
			(SELECT string_agg(format('%I', tablename), ', ') FROM pg_tables WHERE schemaname = 'public'); END $$`,
		`CREATE TABLE big (id int PRIMARY KEY, v text)`,
		`INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 1000000) g`,
		`ANALYZE big`,
	)
	vars := e.baseVars()
	vars["CDC_VALUE_FORMAT"] = "json-with-schema"
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	vars["CDC_HTTP_TOKEN"] = httpToken
	vars["CDC_SNAPSHOT_MAX_ROWS_PER_SECOND"] = "50000"
	// One snapshot for the 999 tables at start (a chunked copy takes about a second per table).
	vars["CDC_SNAPSHOT_STRATEGY"] = "copy"
	p := e.startCDC(vars)
	base := "http://" + vars["CDC_HTTP_ADDR"]
	waitHydrated(t, p, base, statusSmallTables+3, 5*time.Minute)

	// The streaming tables change all along.
	stream := e.streamInserts("stream_a", "stream_b")
	defer stream()

	weight := pageWeight(t, base)
	t.Logf("status page weight: %d bytes (HTML, JS and CSS as served)", weight)

	bctx := newBrowser(t, browser)
	dir := artifactsDir(t)
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		path := filepath.Join(dir, name+".png")
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatalf("open the status page: %v", err)
	}
	waitJS(t, bctx, "the page shows this instance as active", time.Minute,
		`document.getElementById("role").textContent === "active"`)

	t.Run("copy progress", func(t *testing.T) {
		e.exec(`ALTER PUBLICATION it_pub ADD TABLE big`)
		setFilter(t, bctx, "public.big")
		progressOf := `(function () { var b = document.querySelector('tr[data-export="public.big"] .bar');
			return b ? +b.getAttribute("aria-valuenow") : -1; })()`
		first := waitValue(t, bctx, "the big table's copy under way", 2*time.Minute, progressOf, func(v int) bool { return v >= 0 && v < 100 })
		shot("01-copy-started")
		second := waitValue(t, bctx, "the big table's progress bar to grow", 2*time.Minute, progressOf, func(v int) bool { return v > first })
		t.Logf("progress bar: %d%%, then %d%%", first, second)
		if second < 100 {
			text := evalString(t, bctx, `document.querySelector('tr[data-export="public.big"] .copytext').textContent`)
			t.Logf("copy line: %s", text)
			if !strings.Contains(text, "rows/s") {
				t.Errorf("the copy line %q shows no rows/s", text)
			}
			shot("02-copy-progress")
		}
		waitValue(t, bctx, "the big table's progress bar at 100%", 5*time.Minute, progressOf, func(v int) bool { return v == 100 })
		waitJS(t, bctx, "the big table hydrated", time.Minute,
			`document.querySelector('tr[data-export="public.big"] .badge').textContent === "hydrated"`)
		shot("03-copy-done")
	})

	t.Run("failed table with its reason", func(t *testing.T) {
		e.exec(fmt.Sprintf(`INSERT INTO places VALUES (2, '(%s,NaN)')`, secretValue))
		setFilter(t, bctx, "places")
		reason := `(function () { var r = document.querySelector('tr.failed[data-export="public.places"] .reason');
			return r ? r.textContent : ""; })()`
		redacted := waitString(t, bctx, "public.places shown as failed", 2*time.Minute, reason, func(s string) bool { return s != "" })
		if !strings.Contains(redacted, "json-with-schema") || strings.Contains(redacted, secretValue) {
			t.Errorf("failure reason without the token: %q; want the error class, without the value", redacted)
		}
		shot("04-failed-redacted")
		if err := chromedp.Do(bctx, chromedp.SendKeys(chromedp.CSS("#token"), httpToken), chromedp.Click(chromedp.CSS("#use-token"))); err != nil {
			t.Fatal(err)
		}
		full := waitString(t, bctx, "the full failure reason with the token", time.Minute, reason, func(s string) bool { return strings.Contains(s, secretValue) })
		t.Logf("failure reason with the token: %s", full)
		shot("05-failed-full")
	})

	t.Run("1,000 tables, problems first, filter", func(t *testing.T) {
		setFilter(t, bctx, "")
		waitJS(t, bctx, "the count of 1,000 tables", time.Minute,
			`document.getElementById("count").textContent.indexOf("1000 tables, 1000 match, 100 shown") === 0`)
		if first := evalString(t, bctx, `document.querySelector("#rows tr").dataset.export`); first != "public.places" {
			t.Errorf("first row %q, want the failed public.places (problems first)", first)
		}
		shot("06-all-tables")
		setFilter(t, bctx, "t09")
		waitJS(t, bctx, "the filter narrowing to t09..", time.Minute,
			`document.getElementById("count").textContent === "1000 tables, 97 match"`)
		names := evalString(t, bctx, `Array.from(document.querySelectorAll("#rows tr")).map(function (r) { return r.dataset.export; }).join(" ")`)
		rows := strings.Fields(names)
		if len(rows) != 97 {
			t.Errorf("%d rows shown for filter t09, want 97 (t0900 to t0996)", len(rows))
		}
		for _, r := range rows {
			if !strings.HasPrefix(r, "public.t09") {
				t.Errorf("row %s shown for filter t09", r)
			}
		}
		shot("07-filtered")
	})

	t.Run("lag chart and re-copy", func(t *testing.T) {
		setFilter(t, bctx, "stream_")
		points := waitValue(t, bctx, "a lag chart with several samples for public.stream_a", time.Minute,
			`(function () { var l = document.querySelector('tr[data-export="public.stream_a"] svg.lag polyline');
				return l ? l.getAttribute("points").split(" ").length : 0; })()`, func(v int) bool { return v >= 2 })
		t.Logf("lag chart of public.stream_a: %d samples", points)
		before, _ := exportAttempt(t, base, "public.stream_b")
		button := chromedp.CSS(`tr[data-export="public.stream_b"] button.recopy`)
		if err := chromedp.Do(bctx, chromedp.Click(button)); err != nil {
			t.Fatal(err)
		}
		waitJS(t, bctx, "the re-copy button armed", 10*time.Second,
			`document.querySelector('tr[data-export="public.stream_b"] button.recopy').textContent === "confirm re-copy"`)
		if err := chromedp.Do(bctx, chromedp.Click(button)); err != nil {
			t.Fatal(err)
		}
		waitJS(t, bctx, "the re-copy confirmation", 30*time.Second,
			`document.getElementById("msg").textContent.indexOf("re-copy of public.stream_b started") >= 0`)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
			if after, _ := exportAttempt(t, base, "public.stream_b"); after == before+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a minute after the page's re-copy public.stream_b is not at attempt %d", before+1)
			}
		}
		shot("08-recopy")
	})

	t.Run("standby instance", func(t *testing.T) {
		// A second instance on the same slot waits; its page says so.
		standby := maps.Clone(vars)
		standby["CDC_HTTP_ADDR"] = freeAddr(t)
		e.startCDC(standby)
		waitServing(t, "http://"+standby["CDC_HTTP_ADDR"]+"/healthz", time.Minute)
		if err := chromedp.Do(bctx, chromedp.Navigate("http://"+standby["CDC_HTTP_ADDR"]+"/")); err != nil {
			t.Fatalf("open the standby's status page: %v", err)
		}
		waitJS(t, bctx, "the second instance shown as standby", 2*time.Minute,
			`document.getElementById("role").textContent === "standby"`)
		shot("09-standby")
	})

	_, plain := httpCall(t, http.MethodGet, base+"/status", map[string]string{"Accept-Encoding": "identity"}, "")
	_, zipped := httpCall(t, http.MethodGet, base+"/status", map[string]string{"Accept-Encoding": "gzip"}, "")
	t.Logf("GET /status with 1,000 tables: %d bytes, %d gzipped", len(plain), len(zipped))
}

// chromiumPath finds Debian's chromium. Without it the test skips, or fails with CI=true.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "no chromium on PATH: apt-get install -y chromium"
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal(msg + " (CI=true: the browser test must run)")
	}
	t.Skip(msg)
	return ""
}

// newBrowser starts headless Chromium for the test (stopped at cleanup).
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return bctx
}

// artifactsDir is where the test's screenshots go: $CDC_TEST_ARTIFACTS/<test>, by default
// integration/artifacts/<test>, kept after the test.
func artifactsDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("CDC_TEST_ARTIFACTS")
	if root == "" {
		root = "artifacts"
	}
	dir, err := filepath.Abs(filepath.Join(root, t.Name()))
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		t.Fatalf("artifacts directory: %v", err)
	}
	return dir
}

// setFilter types text into the page's filter box (emptied first).
func setFilter(t *testing.T, ctx context.Context, text string) {
	t.Helper()
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(function () { var f = document.getElementById("filter");
		f.value = ""; return f.dispatchEvent(new Event("input")); })()`))
	if err == nil && text != "" {
		err = chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS("#filter"), text))
	}
	if err != nil {
		t.Fatalf("filter %q: %v", text, err)
	}
}

func evalString(t *testing.T, ctx context.Context, expr string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return s
}

// waitJS waits until the boolean expression holds in the page.
func waitJS(t *testing.T, ctx context.Context, what string, timeout time.Duration, expr string) {
	t.Helper()
	waitFunc(t, ctx, what, timeout, expr, func(ok bool) bool { return ok })
}

func waitValue(t *testing.T, ctx context.Context, what string, timeout time.Duration, expr string, ok func(int) bool) int {
	t.Helper()
	return waitFunc(t, ctx, what, timeout, expr, ok)
}

func waitString(t *testing.T, ctx context.Context, what string, timeout time.Duration, expr string, ok func(string) bool) string {
	t.Helper()
	return waitFunc(t, ctx, what, timeout, expr, ok)
}

// waitFunc evaluates expr every 250ms until ok accepts its value; it fails the test after
// timeout with the last value.
func waitFunc[T any](t *testing.T, ctx context.Context, what string, timeout time.Duration, expr string, ok func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
		if err == nil && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s (%s): last value %v, error %v", what, timeout, v, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitHydrated waits until /exports lists n tables, all hydrated.
func waitHydrated(t *testing.T, p *proc, base string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var code int
		var body string
		if resp, err := http.Get(base + "/exports"); err == nil { // refused until cdc listens
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code, body = resp.StatusCode, string(b)
		}
		if code == http.StatusOK && strings.Count(body, `"state":"hydrated"`) == n {
			return
		}
		if done, err := p.exited(); done {
			t.Fatalf("cdc exited (%v) while %d tables were copied", err, n)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tables not hydrated within %s: /exports %d, %d hydrated", n, timeout, code, strings.Count(body, `"state":"hydrated"`))
		}
		time.Sleep(time.Second)
	}
}

// waitServing waits until url answers 200.
func waitServing(t *testing.T, url string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer within %s", url, timeout)
		}
	}
}

// pageWeight is the bytes of the status page as served: its HTML, script and style sheet.
func pageWeight(t *testing.T, base string) int {
	t.Helper()
	total := 0
	for _, path := range []string{"/", "/ui/app.js", "/ui/app.css"} {
		code, body := httpCall(t, http.MethodGet, base+path, nil, "")
		if code != http.StatusOK || body == "" {
			t.Fatalf("GET %s: %d", path, code)
		}
		total += len(body)
	}
	return total
}

// streamInserts inserts a row into each table every 200ms until the returned stop is called.
func (e *env) streamInserts(tables ...string) (stop func()) {
	e.t.Helper()
	conn := e.conn()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			for _, table := range tables {
				if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (v) VALUES ($1)`, table), fmt.Sprintf("change %d", i)); err != nil {
					if !errors.Is(err, context.Canceled) && ctx.Err() == nil {
						e.t.Errorf("insert into %s: %v", table, err)
					}
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}
