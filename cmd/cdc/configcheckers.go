package main

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/kafkaconn"
	"github.com/tidemark/cdc/pkg/schemareg"
	"github.com/tidemark/cdc/pkg/secret"
)

// The checker's validators of single values: each records what is wrong with its variable
// and returns the zero value when something is.

// pgURL checks that a connection is configured and that CDC_PG_URL parses. Without CDC_PG_URL,
// pgx builds the connection from libpq's PG* variables alone, read from the process environment
// (not getenv); they are parsed here only for the TLS posture, and their errors left to pgx.
//
// It returns the connection string and pgx's parsed configuration (nil when there is a problem
// or, without CDC_PG_URL, when the PG* variables are taken as they are). Every file the
// connection names (sslrootcert, sslcert, sslkey, passfile, service file) is checked first,
// without blocking, because pgx reads them as it parses.
func (c *checker) pgURL(s string, getenv func(string) string) (string, *pgconn.Config) {
	if !c.pgFiles(s, getenv) {
		return "", nil
	}
	if s == "" {
		for _, v := range []string{"PGHOST", "PGHOSTADDR", "PGDATABASE", "PGSERVICE"} {
			if getenv(v) != "" {
				// pgx reads the PG* variables itself, from the process; parsed here only to
				// tell the TLS posture, and its errors are pgx's to report at connect.
				cfg, err := pgconn.ParseConfig("")
				if err != nil {
					return "", nil
				}
				return "", cfg
			}
		}
		if !c.empty["CDC_PG_URL"] {
			c.add("CDC_PG_URL", "", "not set; want a URL (postgres://user:password@host:5432/db) or key=value DSN, or libpq PG* variables such as PGHOST and PGDATABASE")
		}
		return "", nil
	}
	const want = "want a URL (postgres://user:password@host:5432/db) or key=value DSN (host=... dbname=...)"
	if m := urlSchemeRE.FindStringSubmatch(s); m != nil && m[1] != "postgres" && m[1] != "postgresql" {
		c.add("CDC_PG_URL", secret.Redact(s), "scheme %s: want postgres:// or postgresql://, or a key=value DSN (host=... dbname=...)", cut(m[1]))
		return "", nil
	}
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		_, rest, _ := strings.Cut(s, "://")
		if authority, _, _ := strings.Cut(rest, "/"); strings.Count(authority, "@") > 1 {
			// libpq ends the user info at the first '@': the rest of the password would be
			// taken for the host, and show in every connection error.
			c.add("CDC_PG_URL", secret.Redact(s), "more than one '@' before the host; percent-encode '@' in the user name or password as %%40")
			return "", nil
		}
	}
	cfg, err := pgconn.ParseConfig(s)
	if err != nil {
		reason := cutN(secret.Scrub(pgParseReason(err), s), 300) // it may quote a huge host or port
		if !isURLConn(s) && strings.Contains(reason, `missing "="`) && strings.Contains(strings.ToLower(s), "password") {
			reason += "; a value with spaces, such as a password, must be quoted: password='...'"
		}
		c.add("CDC_PG_URL", secret.Redact(s), "%s; %s", reason, want)
		return "", nil
	}
	return s, cfg
}

// primaryURL checks CDC_PG_PRIMARY_URL, the optional connection to the primary of a standby
// that CDC_PG_URL names: it must parse, and it is a secret like CDC_PG_URL.
//
// It returns the connection string and pgx's parsed configuration (for the TLS posture), or ""
// and nil when it is not set or has a problem.
func (c *checker) primaryURL(s string) (string, *pgconn.Config) {
	if s == "" {
		return "", nil
	}
	if m := urlSchemeRE.FindStringSubmatch(s); m != nil && m[1] != "postgres" && m[1] != "postgresql" {
		c.add("CDC_PG_PRIMARY_URL", secret.Redact(s), "scheme %s: want postgres:// or postgresql://, or a key=value DSN (host=... dbname=...)", cut(m[1]))
		return "", nil
	}
	cfg, err := pgconn.ParseConfig(s)
	if err != nil {
		c.add("CDC_PG_PRIMARY_URL", secret.Redact(s), "%s; want a URL (postgres://user:password@host:5432/db) or key=value DSN (host=... dbname=...)",
			cutN(secret.Scrub(pgParseReason(err), s), 300))
		return "", nil
	}
	return s, cfg
}

// urlSchemeRE is the scheme of a URL.
var urlSchemeRE = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*)://`)

// pgParseReason is pgconn's reason for rejecting a connection string, without the connection
// string itself: pgconn's redaction is best effort. The reason may still quote a part of it (a
// port, an option's value), so callers scrub it.
func pgParseReason(err error) string {
	pe, ok := errors.AsType[*pgconn.ParseConfigError](err)
	if !ok {
		return "cannot parse"
	}
	text := pe.Error() // "cannot parse `<conn>`: <msg>" or "... (<inner>)"
	inner := pe.Unwrap()
	if inner != nil {
		text = strings.TrimSuffix(text, " ("+inner.Error()+")")
	}
	reason := "cannot parse"
	if i := strings.LastIndex(text, "`: "); i >= 0 {
		reason = text[i+len("`: "):]
	}
	if urlErr, ok := errors.AsType[*url.Error](inner); ok {
		inner = urlErr.Err
	}
	if inner != nil {
		reason += ": " + inner.Error()
	}
	return reason
}

var (
	identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)
	slotRE  = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	topicRE = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)
)

func (c *checker) identifier(name, s string) string {
	if len(s) > maxIdentLen {
		c.add(name, s, "is %d bytes; PostgreSQL's limit for names is %d bytes (NAMEDATALEN-1)", len(s), maxIdentLen)
		return ""
	}
	if !identRE.MatchString(s) {
		c.add(name, s, "want a PostgreSQL identifier: letters, digits, _ and $, not starting with a digit or $, at most 63 characters")
		return ""
	}
	return s
}

// placeholder checks the unchanged-TOAST placeholder: any non-empty UTF-8 text of at most 1,000
// bytes (it is written into every such record).
func (c *checker) placeholder(name, s string) string {
	if s == "" || len(s) > 1000 || !utf8.ValidString(s) {
		c.add(name, s, "want 1 to 1000 bytes of UTF-8 text")
		return ""
	}
	return s
}

func (c *checker) slot(s string) string {
	if len(s) > maxIdentLen {
		c.add("CDC_SLOT", s, "is %d bytes; PostgreSQL's limit for replication slot names is %d (NAMEDATALEN-1)", len(s), maxIdentLen)
		return ""
	}
	if !slotRE.MatchString(s) {
		c.add("CDC_SLOT", s, "want 1 to 63 characters from a-z, 0-9 and _ (PostgreSQL's rule for replication slot names)")
		return ""
	}
	return s
}

// topic checks a topic name, or the topic prefix with maxLen below Kafka's limit so that the
// tables' names fit after it.
func (c *checker) topic(name, s string, maxLen int) string {
	limit := fmt.Sprintf("Kafka's limit for topic names is %d", maxTopicLen)
	if maxLen < maxTopicLen {
		limit += fmt.Sprintf("; the prefix may use %d of them, to leave room for .<schema>.<table>", maxLen)
	}
	switch {
	case len(s) > maxLen:
		c.add(name, s, "is %d characters; %s", len(s), limit)
		return ""
	case !topicRE.MatchString(s) || s == "." || s == "..":
		c.add(name, s, "want 1 to %d characters from A-Z, a-z, 0-9, '.', '_' and '-' (Kafka's rule for topic names)", maxLen)
		return ""
	}
	return s
}

// tables parses CDC_TABLES; prefix ("" when invalid) is used to check that no two tables map to
// the same topic.
func (c *checker) tables(s, prefix string) []change.ExportID {
	if s == "" {
		return nil
	}
	var ids []change.ExportID
	ok := true
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		id, err := change.ParseExportID(entry)
		switch {
		case entry == "":
			c.add("CDC_TABLES", s, "empty entry; want comma-separated schema.table names")
			ok = false
		case err != nil:
			why := "want schema.table"
			if inner := errors.Unwrap(err); inner != nil {
				why = inner.Error()
			}
			c.add("CDC_TABLES", s, "table name %s: %s (entries are comma-separated schema.table names)", quoteCut(entry), why)
			ok = false
		case len(id.Schema) > maxIdentLen || len(id.Table) > maxIdentLen:
			part, n := "table", len(id.Table)
			if len(id.Schema) > maxIdentLen {
				part, n = "schema", len(id.Schema)
			}
			c.add("CDC_TABLES", s, "table name %s: the %s name is %d bytes; PostgreSQL's limit for names is %d bytes (NAMEDATALEN-1)", quoteCut(entry), part, n, maxIdentLen)
			ok = false
		case slices.Contains(ids, id):
			c.add("CDC_TABLES", s, "%s is listed twice", id)
			ok = false
		default:
			ids = append(ids, id)
		}
	}
	if !ok {
		return nil
	}
	for _, id := range ids {
		if prefix == "" {
			break
		}
		if topic := prefix + "." + id.Schema + "." + id.Table; len(topic) > maxTopicLen {
			c.add("CDC_TABLES", s, "table %s: its topic %s is %d characters; Kafka's limit for topic names is %d: shorten CDC_TOPIC_PREFIX", id, quoteCut(topic), len(topic), maxTopicLen)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	if prefix != "" {
		if err := change.CheckTopicCollisions(prefix, ids); err != nil {
			c.add("CDC_TABLES", s, "%v", err)
			return nil
		}
	}
	return ids
}

func (c *checker) brokers(s string) []string {
	if s == "" {
		return nil // reported by parseEnv: the variable is required
	}
	var out []string
	for b := range strings.SplitSeq(s, ",") {
		b = strings.TrimSpace(b)
		if !validHostPort(b, false) {
			c.add("CDC_KAFKA_BROKERS", s, "broker %s: want host:port with a port from 1 to 65535, brokers separated by commas", quoteCut(b))
			continue
		}
		out = append(out, b)
	}
	return out
}

// httpAddr checks CDC_HTTP_ADDR, or its older name CDC_METRICS_ADDR.
func (c *checker) httpAddr(s, old string) string {
	name := "CDC_HTTP_ADDR"
	switch {
	case s != "" && old != "" && s != old:
		c.add("CDC_METRICS_ADDR", old, "is the older name of CDC_HTTP_ADDR, which says %s: set one of them", quoteCut(s))
		return ""
	case s == "":
		s, name = old, "CDC_METRICS_ADDR"
	}
	if s != "" && !validHostPort(s, true) {
		c.add(name, s, "want host:port (or :port for every interface) with a port from 1 to 65535")
		return ""
	}
	return s
}

func validHostPort(s string, emptyHostOK bool) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" && !emptyHostOK || strings.ContainsAny(host, " /") {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

// integer parses an integer in [lo, hi], or equal to alt when alt is not empty.
func (c *checker) integer(name, s string, lo, hi int64, alt string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err == nil && (n >= lo && n <= hi || alt != "" && s == alt) {
		return n
	}
	if alt != "" {
		c.add(name, s, "want an integer from %d to %d, or %s for the broker default", lo, hi, alt)
	} else {
		c.add(name, s, "want an integer from %d to %d", lo, hi)
	}
	return 0
}

func (c *checker) duration(name, s string, least time.Duration) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d < least {
		c.add(name, s, "want a duration of at least %v, such as 500ms, 10s or 2m", least)
		return 0
	}
	return d
}

func (c *checker) durationBetween(name, s string, least, most time.Duration) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil || d < least || d > most {
		c.add(name, s, "want a duration from %v to %v, such as 30s or 2m", least, most)
		return 0
	}
	return d
}

// byteUnits are the size suffixes CDC_HOLD_MEMORY accepts, longest first.
var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1},
}

func (c *checker) bytes(name, s string, least, most int64, bounds string) int64 {
	num, mult := s, int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult || n*mult < least || n*mult > most {
		c.add(name, s, "want a size %s: an integer number of bytes, optionally followed by KiB, MiB, GiB, KB, MB or GB", bounds)
		return 0
	}
	return n * mult
}

func oneOf[T ~string](c *checker, name, s string, allowed ...T) T {
	if slices.Contains(allowed, T(s)) {
		return T(s)
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	c.add(name, s, "want one of %s", strings.Join(names, ", "))
	return ""
}

// kafkaSecurity checks the CDC_KAFKA_TLS_* and CDC_KAFKA_SASL_* variables together, as every
// command that talks to Kafka does (kafkaconn.SecurityEnv).
func (c *checker) kafkaSecurity(e Env) kafkaconn.Security {
	tls := e.KafkaTLS
	if !c.set["CDC_KAFKA_TLS"] {
		tls = "" // the default: an explicit false with a TLS file is a contradiction, the default is not
	}
	s, problems := kafkaconn.SecurityEnv{
		TLS: tls, CAFile: e.KafkaTLSCAFile, CertFile: e.KafkaTLSCertFile, KeyFile: e.KafkaTLSKeyFile,
		ServerName: e.KafkaTLSServerName, Mechanism: e.KafkaSASLMechanism, Username: e.KafkaSASLUsername,
		Password: e.KafkaSASLPassword, Token: e.KafkaOAuthToken, TokenFile: e.KafkaOAuthFile,
	}.Security()
	for _, p := range problems {
		c.add(p.Name, p.Value, "%s", p.Msg)
	}
	return s
}

// schemaRegistry checks the CDC_SCHEMA_REGISTRY_* variables (schemareg.Env) and, with
// CDC_REQUIRE_TLS=true, refuses a registry reached without TLS, as it refuses Kafka's plaintext.
func (c *checker) schemaRegistry(e Env) schemareg.Config {
	cfg, problems := schemareg.Env{
		URL: e.SchemaRegistryURL, Username: e.SchemaRegistryUsername, Password: e.SchemaRegistryPassword,
		CAFile: e.SchemaRegistryCAFile, CertFile: e.SchemaRegistryCertFile, KeyFile: e.SchemaRegistryKeyFile,
		ServerName: e.SchemaRegistryServerName,
	}.Config()
	for _, p := range problems {
		c.add(p.Name, p.Value, "%s", p.Msg)
	}
	// CDC_REQUIRE_TLS's own problems are tlsPostures' to report.
	require := slices.Contains([]string{"true", "1", "yes"}, strings.ToLower(e.RequireTLS))
	if cfg.URL != "" && len(problems) == 0 && !cfg.TLS() && require {
		c.add("CDC_SCHEMA_REGISTRY_URL", "", "CDC_REQUIRE_TLS=true, but the schema registry is reached over plain http://; fix: use its https:// URL (with CDC_SCHEMA_REGISTRY_TLS_CA_FILE for a private CA)")
	}
	return cfg
}
