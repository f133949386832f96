package change

import (
	"fmt"
	"strings"
)

// ExportID names one published table. Schema and Table are the catalog names, unquoted.
type ExportID struct {
	Schema string
	Table  string
}

// String renders "schema.table" with the parts double-quoted when they are not plain lower-case
// identifiers, the way PostgreSQL's quote_ident would.
func (e ExportID) String() string { return QuoteIdent(e.Schema) + "." + QuoteIdent(e.Table) }

// MarshalText implements encoding.TextMarshaler so ExportID can key JSON maps.
func (e ExportID) MarshalText() ([]byte, error) { return []byte(e.String()), nil }

// UnmarshalText parses the String form.
func (e *ExportID) UnmarshalText(b []byte) error {
	v, err := ParseExportID(string(b))
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// ParseExportID parses "schema.table", "table" (schema public) or their double-quoted forms.
func ParseExportID(s string) (ExportID, error) {
	parts, err := splitIdent(strings.TrimSpace(s))
	if err != nil {
		return ExportID{}, fmt.Errorf("table name %q: %w", s, err)
	}
	switch len(parts) {
	case 1:
		return ExportID{Schema: "public", Table: parts[0]}, nil
	case 2:
		return ExportID{Schema: parts[0], Table: parts[1]}, nil
	default:
		return ExportID{}, fmt.Errorf("table name %q: want schema.table", s)
	}
}

// QuoteIdent double-quotes an identifier unless it is a plain lower-case one: the display form of
// names (ExportID.String), for logs, errors and advice. SQL that Tidemark runs quotes with
// pgcat.Ident and pgcat.Table instead, which quote every name (a plain keyword too).
func QuoteIdent(s string) string {
	plain := s != ""
	for i, r := range s {
		if !(r >= 'a' && r <= 'z' || r == '_' || (i > 0 && r >= '0' && r <= '9')) {
			plain = false
			break
		}
	}
	if plain {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func splitIdent(s string) ([]string, error) {
	var parts []string
	for {
		if s == "" {
			return nil, fmt.Errorf("empty identifier")
		}
		var part string
		if s[0] == '"' {
			var b strings.Builder
			i := 1
			for {
				if i >= len(s) {
					return nil, fmt.Errorf("unterminated quote")
				}
				if s[i] == '"' {
					if i+1 < len(s) && s[i+1] == '"' {
						b.WriteByte('"')
						i += 2
						continue
					}
					i++
					break
				}
				b.WriteByte(s[i])
				i++
			}
			part, s = b.String(), s[i:]
		} else {
			end := strings.IndexByte(s, '.')
			if end < 0 {
				end = len(s)
			}
			part, s = strings.ToLower(s[:end]), s[end:]
			if strings.ContainsAny(part, "\" ") || part == "" {
				return nil, fmt.Errorf("invalid identifier %q", part)
			}
		}
		if part == "" {
			return nil, fmt.Errorf("empty identifier")
		}
		parts = append(parts, part)
		if s == "" {
			return parts, nil
		}
		if s[0] != '.' {
			return nil, fmt.Errorf("unexpected %q", s)
		}
		s = s[1:]
	}
}
