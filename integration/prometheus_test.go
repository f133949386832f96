package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/tidemark/cdc/deploy"
	"github.com/tidemark/cdc/internal/testenv"
)

// TestPrometheusScrapesCDC runs a real Prometheus (Debian's package) against a running cdc that
// copies and streams two tables, with the shipped alert rules (their for: shortened):
//   - the series arrive, and every metric the rules and the dashboard use is in cdc's scrape;
//   - every rule evaluates without error, and every dashboard query evaluates;
//   - with every table fine, no alert about tables, the slot or Kafka fires;
//   - a table made to fail (a row over Kafka's record limit) fires TidemarkExportFailed for that
//     table alone.
//
// /metrics is open like /healthz (internal/httpapi/server.go): cdc runs with an admin token, and
// Prometheus scrapes without one.
func TestPrometheusScrapesCDC(t *testing.T) {
	promBin := prometheusBinary(t)
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE huge (id int PRIMARY KEY, t text, b bytea)`,
		`CREATE TABLE small (id int PRIMARY KEY, v text)`,
		`INSERT INTO huge (id, t) VALUES (1, 'fine')`,
		`INSERT INTO small SELECT g, 'row ' || g FROM generate_series(1, 5000) g`,
	)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.huge,public.small"
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	vars["CDC_HTTP_TOKEN"] = httpToken
	p := e.startCDC(vars)
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.huge", "public.small")

	prom := startPrometheus(t, promBin, vars["CDC_HTTP_ADDR"], testRules(t))

	// The series arrive: the copy's rows, both tables hydrated, ready, the slot's retention.
	prom.waitValue(t, `tidemark_snapshot_rows_total{export="public.small"}`, 5000)
	prom.waitValue(t, `count(tidemark_export_state{state="hydrated"})`, 2)
	prom.waitValue(t, `tidemark_ready`, 1)
	prom.waitValue(t, fmt.Sprintf(`count(tidemark_slot_wal_retained_bytes{slot=%q} >= 0)`, e.slot), 1)
	prom.waitValue(t, `count(tidemark_export_watermark_lag_seconds >= 0)`, 2)
	prom.waitValue(t, `up{job="tidemark"}`, 1)

	// promtool finds nothing to say about the names, types and help of a real scrape.
	checkMetrics(t, "http://"+vars["CDC_HTTP_ADDR"]+"/metrics")

	// Every metric the rules and the dashboard use is in a scrape of cdc, and in Prometheus.
	scraped := scrapeNames(t, "http://"+vars["CDC_HTTP_ADDR"]+"/metrics")
	limited := slotWALLimited(t, e.pgURL)
	for _, name := range usedMetricNames(t) {
		conditional := name == "tidemark_slot_wal_keep_size_bytes" || name == "tidemark_slot_wal_safe_size_bytes"
		switch {
		case conditional && !limited:
			if scraped[name] {
				t.Errorf("%s is exported while the server's max_slot_wal_keep_size is unlimited", name)
			}
		case !scraped[name]:
			t.Errorf("the rules or the dashboard use %s, which cdc does not export", name)
		case !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_"):
			if got := prom.query(t, fmt.Sprintf(`count({__name__=%q})`, name)); len(got) == 0 {
				t.Errorf("%s is in cdc's scrape but not in Prometheus", name)
			}
		}
	}
	if !limited {
		t.Log("the server's max_slot_wal_keep_size is -1 (unlimited): the keep-size and safe-size series are absent, as documented")
	}

	// Every dashboard query evaluates (an error fails the query), and each shows data, but for
	// the slot's limit on a server without one and the ETA of copies (none running now).
	qs, err := deploy.DashboardQueries(deploy.Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	mayBeEmpty := func(expr string) bool {
		return strings.Contains(expr, "tidemark_snapshot_eta_seconds") ||
			(!limited && strings.Contains(expr, "tidemark_slot_wal_keep_size_bytes")) ||
			(!limited && strings.Contains(expr, "tidemark_slot_wal_safe_size_bytes"))
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var empty []string
		for _, q := range qs {
			if len(prom.query(t, deploy.GrafanaVariables(q.Expr))) == 0 && !mayBeEmpty(q.Expr) {
				empty = append(empty, q.Where+": "+q.Expr)
			}
		}
		if len(empty) == 0 {
			t.Logf("all %d dashboard queries evaluate, with data where there must be", len(qs))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dashboard queries without data after a minute of scrapes:\n%s", strings.Join(empty, "\n"))
		}
		time.Sleep(time.Second)
	}

	// Every rule evaluates without error; with every table fine, none of these fire.
	prom.waitRulesHealthy(t, len(testRulesFile(t).Alerts()))
	quiet := []string{"TidemarkExportFailed", "TidemarkSlotWALLimitExceeded", "TidemarkSlotWALNearLimit",
		"TidemarkExportLagHigh", "TidemarkTransactionAbortsRising", "TidemarkDown", "TidemarkCopyStalled"}
	time.Sleep(3 * time.Second) // a few evaluations with for: 1s
	for _, a := range prom.alerts(t) {
		if slices.Contains(quiet, a.Labels["alertname"]) {
			t.Errorf("alert %s is %s while every table is fine: %v", a.Labels["alertname"], a.State, a.Labels)
		}
	}

	// A row too large for Kafka fails public.huge alone: its alert fires, for it only.
	e.exec(bigRowSQL("huge", 2, 20, 0))
	var states []string
	deadline = time.Now().Add(2 * time.Minute)
	for {
		var firing []promAlert
		for _, a := range prom.alerts(t) {
			if a.Labels["alertname"] != "TidemarkExportFailed" {
				continue
			}
			if len(states) == 0 || states[len(states)-1] != a.State {
				states = append(states, a.State)
			}
			if a.State == "firing" {
				firing = append(firing, a)
			}
		}
		if len(firing) > 0 {
			if len(firing) != 1 || firing[0].Labels["export"] != "public.huge" || firing[0].Labels["severity"] != "critical" {
				t.Fatalf("TidemarkExportFailed firing for %+v; want public.huge alone", firing)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("TidemarkExportFailed did not fire within 2 minutes of public.huge failing (states seen: %v)", states)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("TidemarkExportFailed for public.huge went through %v", states)
	prom.waitValue(t, `tidemark_ready`, 0)
	prom.waitValue(t, `count(tidemark_export_state{export="public.small",state="hydrated"})`, 1)
}

// prometheusBinary returns the path of prometheus (Debian's package). Without it the test is
// skipped, except in CI (CI=true), where it fails.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("prometheus is not installed (Debian package prometheus; .ci/run installs it): %v", err)
		}
		t.Skipf("prometheus is not installed (Debian package prometheus); with CI=true this fails: %v", err)
	}
	return p
}

// testRulesFile is the shipped rule file with every for: at one second, so that an alert fires
// within a test.
func testRulesFile(t *testing.T) deploy.RuleFile {
	t.Helper()
	f, err := deploy.ParseRules(deploy.AlertRules)
	if err != nil {
		t.Fatal(err)
	}
	for gi := range f.Groups {
		for ri := range f.Groups[gi].Rules {
			f.Groups[gi].Rules[ri].For = "1s"
		}
	}
	return f
}

func testRules(t *testing.T) []byte {
	t.Helper()
	b, err := yaml.Marshal(testRulesFile(t))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// usedMetricNames returns the metric names of the shipped rules' and dashboard's expressions.
func usedMetricNames(t *testing.T) []string {
	t.Helper()
	var exprs []string
	for _, r := range testRulesFile(t).Alerts() {
		exprs = append(exprs, r.Expr)
	}
	qs, err := deploy.DashboardQueries(deploy.Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		exprs = append(exprs, q.Expr)
	}
	return deploy.MetricNames(exprs...)
}

// checkMetrics runs `promtool check metrics` (Prometheus' naming and help lint) on one scrape of
// url and fails on anything it reports.
func checkMetrics(t *testing.T, url string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool (Debian package prometheus, like prometheus itself): %v", err)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = resp.Body
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics on cdc's scrape: %v\n%s", err, out)
	}
}

// scrapeNames returns the series names of one scrape of url (a histogram's _bucket, _sum and
// _count).
func scrapeNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	names := make(map[string]bool)
	for name, f := range fams {
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default:
			names[name] = true
		}
	}
	return names
}

// slotWALLimited reports whether the server sets max_slot_wal_keep_size.
func slotWALLimited(t *testing.T, pgURL string) bool {
	t.Helper()
	var v string
	if err := testenv.Conn(t, pgURL).QueryRow(t.Context(), `SHOW max_slot_wal_keep_size`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v != "-1"
}

// promServer is a Prometheus started by a test.
type promServer struct {
	base string
	log  *testenv.LogBuffer
}

// startPrometheus runs prometheus on a free port, scraping target every second as job
// "tidemark" and evaluating rules every second, until the test ends.
func startPrometheus(t *testing.T, bin, target string, rules []byte) *promServer {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yml"), rules, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - rules.yml
scrape_configs:
  - job_name: tidemark
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr,
		"--log.level=warn")
	cmd.Dir = dir
	s := &promServer{base: "http://" + addr, log: &testenv.LogBuffer{}}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("prometheus log:\n%s", tail(s.log.String(), 8000))
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(s.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-done:
			t.Fatalf("prometheus exited at start:\n%s", s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within a minute:\n%s", s.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// api GETs a Prometheus HTTP API path and decodes its data, failing on any error answer.
func (s *promServer) api(t *testing.T, path string, data any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Status != "success" {
		t.Fatalf("prometheus %s: %d %s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(out.Data, data); err != nil {
		t.Fatalf("prometheus %s: %v: %s", path, err, out.Data)
	}
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// query evaluates an instant query; the result is empty for no data, or a scalar's one sample.
func (s *promServer) query(t *testing.T, q string) []promSample {
	t.Helper()
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	s.api(t, "/api/v1/query?query="+url.QueryEscape(q), &data)
	if data.ResultType != "vector" {
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			t.Fatalf("query %s: %s result: %v", q, data.ResultType, err)
		}
		return []promSample{{Value: v}}
	}
	var out []promSample
	if err := json.Unmarshal(data.Result, &out); err != nil {
		t.Fatalf("query %s: %v", q, err)
	}
	return out
}

// waitValue waits until q has exactly one sample, of value want.
func (s *promServer) waitValue(t *testing.T, q string, want float64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var got []promSample
	for {
		got = s.query(t, q)
		if len(got) == 1 {
			if str, ok := got[0].Value[1].(string); ok && str == fmt.Sprint(want) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("query %s: %v, want one sample of %v", q, got, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (s *promServer) alerts(t *testing.T) []promAlert {
	t.Helper()
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	s.api(t, "/api/v1/alerts", &data)
	return data.Alerts
}

// waitRulesHealthy waits until n alerting rules are loaded and each evaluated without error.
func (s *promServer) waitRulesHealthy(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Type      string `json:"type"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		}
		s.api(t, "/api/v1/rules?type=alert", &data)
		var healthy, total int
		var bad []string
		for _, g := range data.Groups {
			for _, r := range g.Rules {
				total++
				switch r.Health {
				case "ok":
					healthy++
				case "err":
					bad = append(bad, r.Name+": "+r.LastError)
				}
			}
		}
		if len(bad) > 0 {
			t.Fatalf("rules fail to evaluate: %v", bad)
		}
		if total == n && healthy == n {
			t.Logf("prometheus evaluates all %d alerting rules without error", n)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d alerting rules loaded, %d healthy; want %d", total, n, healthy, n)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
