// Package deploy holds what Tidemark ships for operators besides the binary: the Prometheus
// alert rules (prometheus/tidemark-alerts.yml, with their promtool unit tests) and the Grafana
// dashboard (grafana/tidemark.json), embedded, and readers of the PromQL expressions in them.
//
// The expressions are what the tests check: promtool validates them, and the integration test
// compares the metric names they use with a scrape of a running cdc and evaluates them in a
// real Prometheus. docs/monitoring.md describes the metrics, the alerts and the dashboard.
package deploy

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"

	"go.yaml.in/yaml/v3"
)

// AlertRules is the Prometheus rule file, prometheus/tidemark-alerts.yml.
//
//go:embed prometheus/tidemark-alerts.yml
var AlertRules []byte

// Dashboard is the Grafana dashboard, grafana/tidemark.json.
//
//go:embed grafana/tidemark.json
var Dashboard []byte

// RuleFile is the shape of a Prometheus rule file, as far as the tests read it.
type RuleFile struct {
	Groups []RuleGroup `yaml:"groups"`
}

// RuleGroup is one group of a rule file.
type RuleGroup struct {
	Name  string `yaml:"name"`
	Rules []Rule `yaml:"rules"`
}

// Rule is an alerting rule (Alert set) or a recording rule (Record set).
type Rule struct {
	Alert       string            `yaml:"alert,omitempty"`
	Record      string            `yaml:"record,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// ParseRules reads a rule file.
func ParseRules(b []byte) (RuleFile, error) {
	var f RuleFile
	if err := yaml.Unmarshal(b, &f); err != nil {
		return RuleFile{}, fmt.Errorf("parse rule file: %w", err)
	}
	return f, nil
}

// Alerts returns the alerting rules of f, by name.
func (f RuleFile) Alerts() map[string]Rule {
	out := make(map[string]Rule)
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out[r.Alert] = r
			}
		}
	}
	return out
}

// DashboardQuery is one PromQL expression of the dashboard, named by where it is.
type DashboardQuery struct {
	Where string // panel title and target refId, or "variable <name>"
	Expr  string
}

type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title   string  `json:"title"`
	Type    string  `json:"type"`
	Panels  []panel `json:"panels"` // a collapsed row's panels
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// DashboardQueries returns every panel target's expression and every query variable's
// label_values() argument of a Grafana dashboard.
func DashboardQueries(b []byte) ([]DashboardQuery, error) {
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("parse dashboard: %w", err)
	}
	var out []DashboardQuery
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			for _, t := range p.Targets {
				out = append(out, DashboardQuery{Where: fmt.Sprintf("panel %q target %s", p.Title, t.RefID), Expr: t.Expr})
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		if sub := labelValues.FindStringSubmatch(q); sub != nil {
			out = append(out, DashboardQuery{Where: "variable " + v.Name, Expr: sub[1]})
		}
	}
	return out, nil
}

// labelValues matches Grafana's label_values(<selector>, <label>).
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// metricName matches the names of the metrics cdc exports (its own, Go's and the process's).
var metricName = regexp.MustCompile(`\b(?:tidemark|go|process)_[a-zA-Z0-9_]+\b`)

// MetricNames returns the metric names the expressions use, sorted, without duplicates.
// Only names cdc exports count (tidemark_, go_ and process_ prefixes); Prometheus' own series
// such as up are left out.
func MetricNames(exprs ...string) []string {
	var out []string
	for _, e := range exprs {
		out = append(out, metricName.FindAllString(e, -1)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// GrafanaVariables replaces the dashboard's variables in expr with what makes it a plain
// PromQL expression over every job, instance and table: $job, $instance and $export match
// anything, $__rate_interval is one minute.
func GrafanaVariables(expr string) string {
	return grafanaVar.ReplaceAllStringFunc(expr, func(v string) string {
		if v == "$__rate_interval" {
			return "1m"
		}
		return ".*"
	})
}

var grafanaVar = regexp.MustCompile(`\$(?:__rate_interval|job|instance|export)\b`)
