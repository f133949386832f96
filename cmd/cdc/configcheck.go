package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgservicefile"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/conffile"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/sink"
	"github.com/tidemark/cdc/pkg/snapshot"
)

// Limits of the names the configuration gives.
const (
	// maxIdentLen is PostgreSQL's limit for names (NAMEDATALEN-1 bytes): longer ones are
	// truncated by the server, so a slot, publication or table name past it is not the one meant.
	maxIdentLen = 63
	// maxTopicLen is Kafka's limit for topic names.
	maxTopicLen = 249
	// echoLen is how much of an invalid value a problem quotes.
	echoLen = 64
	// echoPathLen is how much of a file's path a problem shows: a path is worth showing whole.
	echoPathLen = 512
)

// cut returns s, or for a long s its first echoLen bytes (whole runes) followed by "…" and its
// length, so that a problem quoting a 100,000-byte value stays readable.
func cut(s string) string { return cutN(s, echoLen) }

func cutN(s string, n int) string {
	if len(s) <= n {
		return s
	}
	end := n
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:end], len(s))
}

// quoteCut is cut applied to a Go-quoted s: "first 64 bytes"… (N bytes).
func quoteCut(s string) string {
	if len(s) <= echoLen {
		return strconv.Quote(s)
	}
	end := echoLen
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return fmt.Sprintf("%s… (%d bytes)", strconv.Quote(s[:end]), len(s))
}

// emptyVars reports each variable of Env that is set but empty or blank, and returns them. An
// empty value is found in environ (getenv cannot tell it from an unset one), a blank one through
// getenv.
func (c *checker) emptyVars(getenv func(string) string, environ []string) map[string]bool {
	empty := make(map[string]bool)
	for _, kv := range environ {
		if name, val, ok := strings.Cut(kv, "="); ok && strings.TrimSpace(val) == "" {
			empty[name] = true
		}
	}
	for _, v := range envVars() {
		if val := getenv(v.Name); val != "" && strings.TrimSpace(val) == "" {
			empty[v.Name] = true
		}
	}
	for _, v := range envVars() {
		if !empty[v.Name] {
			continue
		}
		if v.Required {
			c.add(v.Name, "", "is set but empty; want %s", v.Desc)
		} else {
			shown := v.Shown
			if !strings.HasPrefix(shown, "(") {
				shown = "(" + shown + ")"
			}
			c.add(v.Name, "", "is set but empty; unset it to use the default %s, or give it a value", shown)
		}
	}
	return empty
}

// boolean parses a true/false variable (also 1/0, yes/no).
func (c *checker) boolean(name, s string) bool {
	switch strings.ToLower(s) {
	case "true", "1", "yes":
		return true
	case "false", "0", "no", "":
		return false
	}
	c.add(name, s, "want true or false")
	return false
}

// file checks that path ("" for none) is a regular file that can be read, without blocking on it:
// a FIFO or a device named as a certificate would hang the start (see pkg/conffile). It reports
// false on a problem.
func (c *checker) file(name, path string) bool {
	if path == "" {
		return true
	}
	err := conffile.Check(path, conffile.MaxSize)
	if err == nil {
		return true
	}
	if fe, ok := errors.AsType[*conffile.Error](err); ok {
		c.add(name, "", "%s %s", cutN(fe.Path, echoPathLen), fe.Msg)
	} else {
		c.add(name, "", "%s: %v", cutN(path, echoPathLen), err)
	}
	return false
}

// pgFileKeys are the connection settings that name files pgx reads while it parses the
// connection string, with the libpq variable that sets each and its default under $HOME.
var pgFileKeys = []struct {
	key, envVar, home string
	readIfNamed       bool // pgx reads it whenever it is named; otherwise only if it exists
}{
	{"sslrootcert", "PGSSLROOTCERT", ".postgresql/root.crt", true},
	{"sslcert", "PGSSLCERT", ".postgresql/postgresql.crt", true},
	{"sslkey", "PGSSLKEY", ".postgresql/postgresql.key", true},
	{"passfile", "PGPASSFILE", ".pgpass", false},
	{"servicefile", "PGSERVICEFILE", ".pg_service.conf", false},
}

// pgFiles checks, without blocking, every file that pgx would read for the connection string s
// (or, when s is empty, the PG* variables): each is named by the connection string, else by its
// PG* variable, else is libpq's default under $HOME when that exists; and the files that the
// section of a service file (service=) names. It reports false on a problem.
func (c *checker) pgFiles(s string, getenv func(string) string) bool {
	settings := connSettings(s)
	ok := true
	for _, k := range pgFileKeys {
		name, path := pgFilePath(k.key, settings, getenv)
		if path == "" || path == "system" && k.key == "sslrootcert" || !k.readIfNamed && !exists(path) {
			continue
		}
		if k.key == "sslcert" || k.key == "sslkey" {
			if mode := settings["sslcertmode"]; mode == "disable" || mode == "" && getenv("PGSSLCERTMODE") == "disable" {
				continue
			}
		}
		ok = c.pgFile(name, k.key, path) && ok
	}
	service, name := settings["service"], "CDC_PG_URL"
	if service == "" {
		service, name = getenv("PGSERVICE"), "PGSERVICE"
	}
	if _, file := pgFilePath("servicefile", settings, getenv); ok && service != "" && exists(file) {
		// pgx takes the section's settings over the PG* variables, under the connection string's.
		sf, err := pgservicefile.ReadServicefile(file)
		if err != nil {
			return ok // pgx reports it
		}
		svc, err := sf.GetService(service)
		if err != nil {
			return ok
		}
		for _, k := range pgFileKeys {
			if path := svc.Settings[k.key]; path != "" && settings[k.key] == "" && !(path == "system" && k.key == "sslrootcert") {
				ok = c.pgFile(name, "service "+cut(service)+" in "+cutN(file, echoPathLen)+": "+k.key, path) && ok
			}
		}
	}
	return ok
}

// pgFilePath is the file pgx takes for the setting key: named by the connection string, else by
// its PG* variable, else libpq's default under $HOME when that exists; with the variable to
// blame ("" path for none).
func pgFilePath(key string, settings map[string]string, getenv func(string) string) (name, path string) {
	for _, k := range pgFileKeys {
		if k.key != key {
			continue
		}
		switch {
		case settings[key] != "":
			return "CDC_PG_URL", settings[key]
		case getenv(k.envVar) != "":
			return k.envVar, getenv(k.envVar)
		case getenv("HOME") != "":
			if path := filepath.Join(getenv("HOME"), k.home); exists(path) || isLink(path) {
				return "CDC_PG_URL", path
			}
		}
	}
	return "", ""
}

// pgFile checks one file of the PostgreSQL connection; what says which setting named it:
// "CDC_PG_URL: sslrootcert /x is a named pipe, not a regular file".
func (c *checker) pgFile(name, what, path string) bool {
	if c.file(name, path) {
		return true
	}
	if name == "CDC_PG_URL" || strings.HasPrefix(what, "service ") {
		last := c.problems[len(c.problems)-1].(*varError)
		last.Msg = what + " " + last.Msg
	}
	return false
}

func isLink(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// isURLConn reports whether a PostgreSQL connection string is a URL rather than a key=value DSN.
func isURLConn(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// connSettings returns the settings a PostgreSQL connection string gives, as pgx reads them: the
// query parameters of a URL, or the pairs of a key=value DSN. It is lenient: what it cannot read,
// pgx refuses before it opens any file.
func connSettings(s string) map[string]string {
	settings := make(map[string]string)
	if isURLConn(s) {
		// As pgx (and libpq): the user info ends at an '@' met before any '/', and the query
		// starts at the first '?' after it; pairs split at '&' and '=', each half
		// percent-decoded ('+' is not a space), the last occurrence winning.
		_, p, _ := strings.Cut(s, "://")
		if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
			p = p[i+1:]
		}
		_, query, ok := strings.Cut(p, "?")
		if !ok {
			return settings
		}
		for pair := range strings.SplitSeq(query, "&") {
			k, v, _ := strings.Cut(pair, "=")
			settings[uriDecode(k)] = uriDecode(v)
		}
		return settings
	}
	i := 0
	skip := func() {
		for i < len(s) && strings.IndexByte(" \t\n\r\v\f", s[i]) >= 0 {
			i++
		}
	}
	for {
		skip()
		start := i
		for i < len(s) && s[i] != '=' && strings.IndexByte(" \t\n\r\v\f", s[i]) < 0 {
			i++
		}
		key := s[start:i]
		skip()
		if key == "" || i >= len(s) || s[i] != '=' {
			return settings
		}
		i++
		skip()
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			for i++; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
			i = min(i+1, len(s)) // past the closing quote
		} else {
			for ; i < len(s) && strings.IndexByte(" \t\n\r\v\f", s[i]) < 0; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				val.WriteByte(s[i])
			}
		}
		settings[key] = val.String()
	}
}

// uriDecode percent-decodes a URL component as pgx does: %XX (hex) is a byte, anything else
// stays, and spaces around the component are dropped.
func uriDecode(raw string) string {
	raw = strings.Trim(raw, " ")
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		if raw[i] == '%' && i+2 < len(raw) {
			if n, err := strconv.ParseUint(raw[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(n))
				i += 2
				continue
			}
		}
		b.WriteByte(raw[i])
	}
	return b.String()
}

// contradictions reports settings that contradict each other: one that has no effect because of
// another is an error, since the user who set it expects an effect. (CDC_KAFKA_TLS=false with a
// TLS file, SASL credentials of another mechanism, and CDC_HTTP_ADDR against CDC_METRICS_ADDR
// are checked where those variables are.)
func (c *checker) contradictions(e Env, p pipeline.Config) {
	if p.ValueFormat == codec.FormatAvro && strings.TrimSpace(e.SchemaRegistryURL) == "" && !c.empty["CDC_SCHEMA_REGISTRY_URL"] {
		c.add("CDC_SCHEMA_REGISTRY_URL", "", "is required by CDC_VALUE_FORMAT=avro, whose records name their schemas by registry id: set it to the registry's Confluent-compatible API (for Apicurio Registry, http://host:8080/apis/ccompat/v7), or choose another CDC_VALUE_FORMAT")
	}
	if c.set["CDC_UNCHANGED_TOAST_PLACEHOLDER"] && e.UnchangedToast != string(codec.UnchangedPlaceholder) {
		c.add("CDC_UNCHANGED_TOAST_PLACEHOLDER", "", "is set, but only CDC_UNCHANGED_TOAST=placeholder uses it (CDC_UNCHANGED_TOAST is %s): unset it, or set CDC_UNCHANGED_TOAST=placeholder", cut(e.UnchangedToast))
	}
	if c.set["CDC_SNAPSHOT_CHUNK_ROWS"] && e.SnapshotStrategy == string(snapshot.StrategyCopy) {
		c.add("CDC_SNAPSHOT_CHUNK_ROWS", "", "is set, but CDC_SNAPSHOT_STRATEGY=copy does not copy in chunks: unset it, or use the chunked strategy")
	}
	if c.set["CDC_KAFKA_TRANSACTION_TIMEOUT"] && e.Delivery == string(sink.AtLeastOnce) {
		c.add("CDC_KAFKA_TRANSACTION_TIMEOUT", "", "is set, but CDC_DELIVERY=at-least-once uses no transactions: unset it, or use exactly-once")
	}
	if settings := connSettings(p.PGURL); p.PGURL != "" && settings["sslmode"] == "disable" {
		var named []string
		for _, k := range []string{"sslrootcert", "sslcert", "sslkey"} {
			if settings[k] != "" {
				named = append(named, k)
			}
		}
		if len(named) > 0 {
			c.add("CDC_PG_URL", "", "has sslmode=disable, which turns TLS off, but also %s: remove %s, or use sslmode=verify-full",
				strings.Join(named, " and "), map[bool]string{true: "it", false: "them"}[len(named) == 1])
		}
	}
	if p.Sink.WatermarkTopic != "" && p.TopicPrefix != "" {
		for _, id := range p.Tables {
			if change.TopicName(p.TopicPrefix, id) == p.Sink.WatermarkTopic {
				c.add("CDC_WATERMARK_TOPIC", p.Sink.WatermarkTopic, "is the topic of table %s too: choose another name", id)
			}
		}
	}
}
