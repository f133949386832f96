package envdoc

import (
	"strings"
	"testing"
)

type sample struct {
	URL   string `env:"X_URL,required" helpDefault:"(required)" desc:"the URL"`
	Level string `env:"X_LEVEL" envDefault:"info" desc:"debug | info"`
	Topic string `env:"X_TOPIC" helpDefault:"<prefix>.w" desc:"a *topic*"`
}

func TestVars(t *testing.T) {
	vars := Vars[sample]()
	want := []Var{
		{Name: "X_URL", Shown: "(required)", Required: true, Desc: "the URL"},
		{Name: "X_LEVEL", Default: "info", Shown: "info", Desc: "debug | info"},
		{Name: "X_TOPIC", Shown: "<prefix>.w", Desc: "a *topic*"},
	}
	if len(vars) != len(want) {
		t.Fatalf("Vars() = %+v, want %+v", vars, want)
	}
	for i := range want {
		if vars[i] != want[i] {
			t.Errorf("Vars()[%d] = %+v, want %+v", i, vars[i], want[i])
		}
	}
	if v, ok := Find(vars, "X_LEVEL"); !ok || v.Default != "info" {
		t.Errorf("Find(X_LEVEL) = %+v, %v", v, ok)
	}
	if _, ok := Find(vars, "X_NONE"); ok {
		t.Error("Find(X_NONE) found a variable")
	}
}

func TestWriteTableAligned(t *testing.T) {
	var b strings.Builder
	WriteTable(&b, Vars[sample]())
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("table has %d lines, want 4:\n%s", len(lines), b.String())
	}
	col := strings.Index(lines[0], "MEANING")
	for _, l := range lines[1:] {
		if !strings.HasPrefix(l[col:], "the URL") && !strings.HasPrefix(l[col:], "debug") && !strings.HasPrefix(l[col:], "a *topic*") {
			t.Errorf("meaning not in the MEANING column (%d): %q", col, l)
		}
	}
}

func TestMarkdownEscapes(t *testing.T) {
	md := Markdown(Vars[sample]())
	for _, want := range []string{
		"| `X_URL` | (required) | the URL |",
		"| `X_LEVEL` | `info` | debug \\| info |",
		"| `X_TOPIC` | `<prefix>.w` | a \\*topic\\* |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}
