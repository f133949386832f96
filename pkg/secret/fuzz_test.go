package secret

import (
	"net/url"
	"strings"
	"testing"
)

// fuzzTemplates embed a password into a connection string the way a user would write it. Each
// returns the string and the forms of the password it contains (as typed, and encoded).
var fuzzTemplates = []struct {
	name   string
	render func(pw string) (conn string, forms []string)
}{
	{"url raw", func(pw string) (string, []string) {
		return "postgres://alice:" + pw + "@db.example:5432/app?sslmode=disable", []string{pw}
	}},
	{"url encoded", func(pw string) (string, []string) {
		u := url.URL{Scheme: "postgresql", User: url.UserPassword("alice", pw), Host: "db.example", Path: "/app"}
		enc, _ := u.User.Password()
		return u.String(), []string{pw, enc, strings.TrimPrefix(u.User.String(), "alice:")}
	}},
	{"other scheme", func(pw string) (string, []string) {
		return "mysql://alice:" + pw + "@db.example/app", []string{pw}
	}},
	{"no scheme", func(pw string) (string, []string) {
		return "alice:" + pw + "@db.example:5432/app", []string{pw}
	}},
	{"query encoded", func(pw string) (string, []string) {
		enc := url.QueryEscape(pw)
		return "postgres://db.example:5432/app?sslmode=disable&password=" + enc + "&application_name=cdc", []string{pw, enc}
	}},
	{"query raw", func(pw string) (string, []string) {
		return "postgres://db.example/app?password=" + pw + "&sslmode=disable", []string{pw}
	}},
	{"query sslpassword", func(pw string) (string, []string) {
		enc := url.QueryEscape(pw)
		return "postgresql://alice@db.example/app?sslpassword=" + enc, []string{pw, enc}
	}},
	{"dsn quoted", func(pw string) (string, []string) {
		q := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
		return "host=db.example user=alice password=" + q + " dbname=app", []string{pw, q}
	}},
	{"dsn unquoted", func(pw string) (string, []string) {
		var b strings.Builder
		for i := range len(pw) {
			if strings.IndexByte(" \t\n\r\v\f\\'", pw[i]) >= 0 {
				b.WriteByte('\\')
			}
			b.WriteByte(pw[i])
		}
		return "host=db.example port=5432 password=" + b.String() + " user=alice", []string{pw, b.String()}
	}},
	{"dsn unquoted with space", func(pw string) (string, []string) {
		// As a user types a password with a space without quoting it: libpq rejects the DSN,
		// and the error must not show any word of it.
		forms := []string{pw}
		for _, w := range strings.Fields(pw) {
			if len(w) >= 4 {
				forms = append(forms, w)
			}
		}
		return "host=db.example password=" + pw + " dbname=app", forms
	}},
	{"dsn sslpassword", func(pw string) (string, []string) {
		q := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
		return "sslpassword=" + q + " host=db.example", []string{pw, q}
	}},
}

// FuzzRedact embeds a password into every template and checks that neither Redact's output nor
// Scrub's output for an error quoting the string contains it in any form.
func FuzzRedact(f *testing.F) {
	for _, pw := range []string{
		"s3cret", "p@ss@word", "se:cr:et", "pa/ss/wd", "pa?ss#wd", "1234/5678", "se cret", `it's\odd`,
		"a&b=c&d", "%41%42", "pass word@host:5432/db?x=y", "password=hunter2", "'quoted'", "über–geheim",
		"ends\\", "@@@@", "::::", "////", "xx@db", "abc def123", "one two three", "a b c d", "abc x=y", "abc foo = bar",
	} {
		for i := range fuzzTemplates {
			f.Add(uint8(i), pw)
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, pw string) {
		tmpl := fuzzTemplates[int(which)%len(fuzzTemplates)]
		if len(pw) < 4 {
			t.Skip("passwords shorter than 4 bytes can occur in the template")
		}
		if tmpl.name == "query raw" && strings.Contains(pw, "&") {
			// An unencoded "&key=" inside a query password is a second parameter; the user
			// must percent-encode it, and only the part before it is masked.
			t.Skip("raw query password with '&'")
		}
		if tmpl.name == "dsn unquoted with space" && !unquotedWithSpace(pw) {
			t.Skip("not a password one would type unquoted")
		}
		conn, forms := tmpl.render(pw)
		baseline, _ := tmpl.render(Mask)
		for _, form := range forms {
			if strings.Contains(baseline, form) || strings.Contains(Mask, form) {
				t.Skip("the password occurs in the template")
			}
		}
		redacted := Redact(conn)
		scrubbed := Scrub("cannot parse `"+conn+"`: invalid value ("+pw+")", conn)
		for _, form := range forms {
			if strings.Contains(redacted, form) {
				t.Fatalf("%s: Redact(%q) = %q, contains %q", tmpl.name, conn, redacted, form)
			}
			if strings.Contains(scrubbed, form) {
				t.Fatalf("%s: Scrub of %q = %q, contains %q", tmpl.name, conn, scrubbed, form)
			}
		}
	})
}

// unquotedWithSpace reports whether pw, typed unquoted after "password=", is read as one value by
// a reader that takes words up to the next libpq key=: it has no quote or backslash, does not
// start or end with white space, and no word after its first is a libpq key with '='.
func unquotedWithSpace(pw string) bool {
	if pw != strings.TrimSpace(pw) || strings.ContainsAny(pw, "'\\") {
		return false
	}
	words := strings.Fields(pw)
	for i := range words {
		if i > 0 && isKey(strings.Join(words[i:], " ")) {
			return false
		}
	}
	return true
}
