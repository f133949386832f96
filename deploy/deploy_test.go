package deploy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// promtool returns the path of promtool (Debian's package prometheus). Without it the test is
// skipped, except in CI (CI=true), where it fails.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is not installed (Debian package prometheus; .ci/run installs it): %v", err)
		}
		t.Skipf("promtool is not installed (Debian package prometheus); with CI=true this fails: %v", err)
	}
	return p
}

func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

func TestPromtoolCheckRules(t *testing.T) {
	out := runPromtool(t, "prometheus", "check", "rules", "tidemark-alerts.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules did not report SUCCESS:\n%s", out)
	}
}

// TestPromtoolTestRules runs the rules' unit tests: each alert fires on a bad synthetic series
// and stays silent on a healthy one.
func TestPromtoolTestRules(t *testing.T) {
	out := runPromtool(t, "prometheus", "test", "rules", "tidemark-alerts.test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules did not report SUCCESS:\n%s", out)
	}
}

// TestEveryAlertIsTested: each alert of the rule file has a case where it fires and one where
// it stays silent in the promtool unit tests, a severity and its annotations.
func TestEveryAlertIsTested(t *testing.T) {
	rules, err := ParseRules(AlertRules)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("prometheus/tidemark-alerts.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	alerts := rules.Alerts()
	if len(alerts) == 0 {
		t.Fatal("no alerts in the rule file")
	}
	for name, r := range alerts {
		if !fires[name] || !silent[name] {
			t.Errorf("%s: the unit tests have a firing case: %v, a silent case: %v; want both", name, fires[name], silent[name])
		}
		if s := r.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", name, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: want a summary and a description", name)
		}
	}
	for name := range fires {
		if _, ok := alerts[name]; !ok {
			t.Errorf("the unit tests name an alert the rule file does not have: %s", name)
		}
	}
}

// TestDashboardQueriesArePromQL has promtool parse every dashboard expression, as recording
// rules of a throwaway rule file, with the Grafana variables filled in.
func TestDashboardQueriesArePromQL(t *testing.T) {
	qs, err := DashboardQueries(Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	f := RuleFile{Groups: []RuleGroup{{Name: "dashboard"}}}
	for _, q := range qs {
		f.Groups[0].Rules = append(f.Groups[0].Rules, Rule{Record: "dashboard:query", Expr: GrafanaVariables(q.Expr)})
	}
	b, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dashboard.yml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	runPromtool(t, dir, "check", "rules", "dashboard.yml")
}

// TestDashboardShape checks what Grafana needs to import the dashboard: unique panel ids,
// panels inside the 24-column grid, a query per panel on the data source variable, and every
// variable the queries use defined.
func TestDashboardShape(t *testing.T) {
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		t.Fatalf("grafana/tidemark.json is not valid JSON: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	ids := map[int]bool{}
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: duplicate id %d", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X < 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: want the data source variable ${datasource}", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, v := range []string{"job", "instance", "export"} {
				if strings.Contains(tg.Expr, "$"+v) && !vars[v] {
					t.Errorf("panel %q uses $%s, which the dashboard does not define", p.Title, v)
				}
			}
		}
	}
	if !vars["datasource"] {
		t.Error("the dashboard does not define the datasource variable")
	}
}

// TestMetricsDocumented: every metric the rules and the dashboard use is described in
// docs/monitoring.md.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/monitoring.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range usedMetrics(t) {
		// A histogram is described under its own name, not its series'.
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			name = strings.TrimSuffix(name, suffix)
		}
		if !strings.Contains(string(doc), "`"+name) {
			t.Errorf("docs/monitoring.md does not describe %s", name)
		}
	}
}

func usedMetrics(t *testing.T) []string {
	t.Helper()
	rules, err := ParseRules(AlertRules)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := DashboardQueries(Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, r := range rules.Alerts() {
		exprs = append(exprs, r.Expr)
	}
	for _, q := range qs {
		exprs = append(exprs, q.Expr)
	}
	names := MetricNames(exprs...)
	if len(names) < 10 {
		t.Fatalf("found only %d metric names in the rules and the dashboard: %v", len(names), names)
	}
	return names
}

func TestMetricNames(t *testing.T) {
	got := MetricNames(`sum by (le) (rate(tidemark_sink_batch_duration_seconds_bucket{job=~"$job"}[1m]))`,
		`up{job="tidemark"} == 0 and process_open_fds > go_goroutines`, `tidemark_ready`)
	want := []string{"go_goroutines", "process_open_fds", "tidemark_ready", "tidemark_sink_batch_duration_seconds_bucket"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("MetricNames = %v, want %v", got, want)
	}
}
