// Package secrettest supplies connection strings that hold a known password, in every form a
// user may write one, for tests that check that no error or log line shows it.
package secrettest

import (
	"encoding/json"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// Password is the known password. Its pieces between separators are distinct words, so that a
// piece left behind by a mistyped URL is found too.
const Password = "Zebra7:Quokka8@Wombat9/Ibis4?Lynx5#Okapi6&Tapir3"

// pieces are the words of Password.
var pieces = strings.FieldsFunc(Password, func(r rune) bool { return strings.ContainsRune(":@/?#&", r) })

// Case is one connection string.
type Case struct {
	Name       string
	ConnString string
}

// ConnStrings returns connection strings to a server at addr (host:port) holding Password, as a
// URL, a key=value DSN, a query parameter, and mistyped: unencoded, another scheme, a bad port, an
// unterminated quote. Some parse, so a connection is attempted; others fail to parse.
func ConnStrings(addr string) []Case {
	host, port, _ := net.SplitHostPort(addr)
	userinfo := url.UserPassword("cdc", Password).String()
	quoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(Password) + "'"
	const opts = "sslmode=disable&connect_timeout=5"
	// spaced is Password with a space, typed without quotes or escapes: libpq rejects it, and
	// the rejection quotes the word after the space.
	spaced := strings.Replace(Password, ":", " ", 1)
	return []Case{
		{"url", "postgres://" + userinfo + "@" + addr + "/app?" + opts},
		{"postgresql url, query password", "postgresql://cdc@" + addr + "/app?" + opts + "&password=" + url.QueryEscape(Password)},
		{"query sslpassword", "postgres://cdc@" + addr + "/app?" + opts + "&sslpassword=" + url.QueryEscape(Password)},
		{"dsn quoted", "host=" + host + " port=" + port + " user=cdc password=" + quoted + " dbname=app sslmode=disable connect_timeout=5"},
		{"dsn unquoted", "host=" + host + " port=" + port + " user=cdc password=" + Password + " dbname=app sslmode=disable"},
		{"dsn sslpassword", "sslpassword=" + quoted + " host=" + host + " port=" + port + " user=cdc sslmode=disable"},
		{"url unencoded", "postgres://cdc:" + Password + "@" + addr + "/app"},
		{"url unencoded @ only", "postgres://cdc:Zebra7@Quokka8@" + addr + "/app?" + opts},
		{"other scheme", "mysql://" + userinfo + "@" + addr + "/app"},
		{"url bad port", "postgres://" + userinfo + "@" + host + ":notaport/app"},
		{"url bad escape", "postgres://cdc:" + Password + "%zz@" + addr + "/app"},
		{"dsn unterminated quote", "host=" + host + " password='" + Password + " sslmode=disable"},
		{"dsn bad option", "host=" + host + " password=" + quoted + " sslmode=maybe"},
		{"dsn unquoted space", "host=" + host + " port=" + port + " password=" + spaced + " dbname=app sslmode=disable"},
		{"dsn unquoted space at end", "host=" + host + " port=" + port + " password=" + spaced},
		{"url unencoded space", "postgres://cdc:" + spaced + "@" + addr + "/app?" + opts},
	}
}

// Leaks returns the forms of Password that text contains: as typed, percent-encoded, quoted by
// JSON or Go, or any of its words.
func Leaks(text string) []string {
	json, _ := json.Marshal(Password)
	forms := []string{
		Password, url.QueryEscape(Password), url.PathEscape(Password),
		strings.Trim(string(json), `"`), strings.Trim(strconv.Quote(Password), `"`),
	}
	var found []string
	for _, f := range append(forms, pieces...) {
		if strings.Contains(text, f) {
			found = append(found, f)
		}
	}
	return found
}

// Check fails t if text shows Password in any form.
func Check(t testing.TB, what, text string) {
	t.Helper()
	if leaks := Leaks(text); len(leaks) > 0 {
		t.Errorf("%s shows the password (%q):\n%s", what, leaks, text)
	}
}

// ClosedAddr returns a local address nothing listens on: a connection to it is refused at once.
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("close listener: %v", err)
	}
	return addr
}
