package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/tidemark/cdc/internal/envdoc"
)

// declaredVars reads the variable names, defaults and descriptions straight from Env's tags, so
// that a variable added to Env cannot be left out of the help.
func declaredVars(tb testing.TB) []envdoc.Var {
	tb.Helper()
	var vars []envdoc.Var
	for f := range reflect.TypeFor[Env]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("env"), ",")
		if !strings.HasPrefix(name, "CDC_") {
			tb.Fatalf("field %s: env tag %q does not name a CDC_ variable", f.Name, f.Tag.Get("env"))
		}
		if f.Tag.Get("desc") == "" {
			tb.Fatalf("field %s (%s) has no desc tag", f.Name, name)
		}
		vars = append(vars, envdoc.Var{Name: name, Default: f.Tag.Get("envDefault"), Desc: f.Tag.Get("desc")})
	}
	if len(vars) < 19 {
		tb.Fatalf("Env declares %d variables, want at least 19", len(vars))
	}
	return vars
}

func TestHelpListsEveryVariable(t *testing.T) {
	var b strings.Builder
	writeHelp(&b)
	help := b.String()
	lines := strings.Split(help, "\n")
	for _, v := range declaredVars(t) {
		t.Run(v.Name, func(t *testing.T) {
			var row string
			for _, l := range lines {
				if fields := strings.Fields(l); len(fields) > 0 && fields[0] == v.Name {
					row = l
				}
			}
			if row == "" {
				t.Fatalf("help has no row for %s:\n%s", v.Name, help)
			}
			if !strings.Contains(row, v.Default) || !strings.Contains(row, v.Desc) {
				t.Errorf("row %q lacks default %q or meaning %q", row, v.Default, v.Desc)
			}
		})
	}
}

func TestHelpTableIsAligned(t *testing.T) {
	var b strings.Builder
	writeHelp(&b)
	col := -1
	for _, l := range strings.Split(b.String(), "\n") {
		fields := strings.Fields(l)
		if len(fields) < 3 || !strings.HasPrefix(fields[0], "CDC_") {
			continue
		}
		// The default column starts at the same offset on every row.
		at := strings.Index(l, fields[1])
		if col == -1 {
			col = at
		} else if at != col {
			t.Errorf("row %q: default starts at column %d, want %d", l, at, col)
		}
	}
}

func TestHelpUsageAndPGNote(t *testing.T) {
	var b strings.Builder
	writeHelp(&b)
	for _, want := range []string{"cdc [run|check [--wait-failover-ready[=10m]]|help|watermarks|resnapshot schema.table|health [ready]|version]", "--wait-failover-ready[=DURATION]", "PGHOST", "PGPASSWORD", "CDC_PG_URL"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func TestHelpMarkdown(t *testing.T) {
	md := helpMarkdown()
	rows := strings.Split(strings.TrimSuffix(md, "\n"), "\n")
	vars := declaredVars(t)
	if len(rows) != len(vars)+2 {
		t.Fatalf("table has %d rows, want a header, a separator and %d variables:\n%s", len(rows), len(vars), md)
	}
	cellSep := regexp.MustCompile(`(^|[^\\])\|`) // an unescaped pipe
	for i, v := range vars {
		row := rows[i+2]
		if n := len(cellSep.FindAllString(row, -1)); n != 4 {
			t.Errorf("row %q has %d cell separators, want 4", row, n)
		}
		if !strings.HasPrefix(row, "| `"+v.Name+"` |") {
			t.Errorf("row %d is %q, want it to start with %s", i, row, v.Name)
		}
		if v.Default != "" && !strings.Contains(row, "`"+v.Default+"`") {
			t.Errorf("row %q lacks default %q", row, v.Default)
		}
	}
}

// TestDocsConfigTable keeps the configuration table of docs/configuration.md equal to the help.
func TestDocsConfigTable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), helpMarkdown()) {
		t.Errorf("docs/configuration.md does not contain the configuration table; paste this in:\n%s", helpMarkdown())
	}
}
