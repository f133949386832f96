// Package envdoc reads the documentation of a command's environment variables from the struct
// tags of its configuration type, and prints it: the aligned table of `cdc help` and
// `tidemark-apply help`, and the same table in Markdown for the documentation.
//
// The tags are caarlos0/env's (`env:"NAME,required"`, `envDefault:"..."`) plus two of the
// project's own: `desc` (the meaning) and `helpDefault` (the default as help shows it, when it
// is not a literal value: "(required)", "<prefix>.__watermarks").
package envdoc

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"text/tabwriter"
)

// Var describes one environment variable, read from its field's tags.
type Var struct {
	Name     string
	Default  string // envDefault
	Shown    string // the default as help shows it: helpDefault, else Default
	Required bool
	Desc     string
}

// Vars lists the variables of the struct type T in declaration order.
func Vars[T any]() []Var {
	var vars []Var
	for f := range reflect.TypeFor[T]().Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("env"), ",")
		v := Var{
			Name:     name,
			Default:  f.Tag.Get("envDefault"),
			Shown:    f.Tag.Get("helpDefault"),
			Required: slices.Contains(strings.Split(opts, ","), "required"),
			Desc:     f.Tag.Get("desc"),
		}
		if v.Shown == "" {
			v.Shown = v.Default
		}
		vars = append(vars, v)
	}
	return vars
}

// Find returns the variable called name, and whether there is one.
func Find(vars []Var, name string) (Var, bool) {
	i := slices.IndexFunc(vars, func(v Var) bool { return v.Name == name })
	if i < 0 {
		return Var{}, false
	}
	return vars[i], true
}

// WriteTable writes vars as an aligned, indented table: VARIABLE, DEFAULT, MEANING.
func WriteTable(w io.Writer, vars []Var) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  VARIABLE\tDEFAULT\tMEANING")
	for _, v := range vars {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", v.Name, v.Shown, v.Desc)
	}
	tw.Flush()
}

// Markdown is the table of WriteTable in Markdown.
func Markdown(vars []Var) string {
	var b strings.Builder
	b.WriteString("| Variable | Default | Meaning |\n")
	b.WriteString("|---|---|---|\n")
	for _, v := range vars {
		def := "`" + strings.ReplaceAll(v.Shown, "|", `\|`) + "`"
		if strings.HasPrefix(v.Shown, "(") {
			def = mdEscape(v.Shown) // (required), (none), ...: words, not a value
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Name, def, mdEscape(v.Desc))
	}
	return b.String()
}

// mdEscape keeps plain cell text from ending the cell or being read as markup.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "*", `\*`).Replace(s)
}
