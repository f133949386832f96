package pgcat

import (
	"strings"

	"github.com/tidemark/cdc/pkg/change"
)

// The quoting of names and values in the SQL Tidemark runs. Names shown to people (logs, error
// text, advice) use change's display form instead (ExportID.String, change.QuoteIdent), which
// leaves plain lower-case names unquoted.

// Ident renders s as a double-quoted identifier, whatever its case and even when it is a
// keyword.
func Ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// Table renders e as a schema-qualified, quoted table name.
func Table(e change.ExportID) string { return Ident(e.Schema) + "." + Ident(e.Table) }

// Literal renders s as a string literal the way PostgreSQL's quote_literal does: single quotes
// doubled, and, when s has a backslash, as an escape string (E'...') with backslashes doubled,
// so it reads the same whatever standard_conforming_strings says.
func Literal(s string) string {
	q := strings.ReplaceAll(s, "'", "''")
	if !strings.Contains(s, `\`) {
		return "'" + q + "'"
	}
	return "E'" + strings.ReplaceAll(q, `\`, `\\`) + "'"
}

// CommandLiteral renders s as a string literal of the replication protocol's commands
// (START_REPLICATION's options), whose scanner knows only '...' with doubled quotes: a backslash
// is an ordinary character there.
func CommandLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
