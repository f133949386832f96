package secret

import (
	"cmp"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// Mask replaces every password.
const Mask = "xxxxx"

// minScrub is the shortest password Scrub looks for in free text: a shorter one cannot be told
// apart from ordinary words. Redact masks password fields of any length.
const minScrub = 3

var (
	// schemeRE is a URL's scheme and "//", whatever the scheme.
	schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://`)
	// kvStartRE is the start of a key=value DSN; a string without a scheme that does not start
	// like one is read as a URL without its scheme (user:password@host/db).
	kvStartRE = regexp.MustCompile(`^\s*[A-Za-z_][A-Za-z0-9_]*\s*=`)
	// passwordKeyRE is the key of a password field (password, sslpassword, any case) and the
	// '=' after it; passwordValueEnd finds where its value ends.
	passwordKeyRE = regexp.MustCompile(`(?i)\b\w*password\s*=\s*`)
	// kvKeyRE is a word followed by '=': where an unquoted value that held white space ends, if
	// the word is one of libpqKeys.
	kvKeyRE = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*=`)
	// queryPasswordRE is a password parameter of a URL query, up to its value.
	queryPasswordRE = regexp.MustCompile(`(?i)(?:^|[?&])\w*password=`)
	// embeddedURLRE is a URL's userinfo password inside free text: a token (up to white space or
	// a quote) with a scheme, a user name and a password ending at the token's last '@'.
	embeddedURLRE = regexp.MustCompile("(?i)(\\b[a-z][a-z0-9+.-]*://[^\\s:@/'\"`]*):[^\\s'\"`]*@")
)

// Redact returns the connection string s with every password masked: the password of a URL's
// user info, whatever the scheme and whether or not the URL parses; password and sslpassword
// query parameters; and password fields of a key=value DSN, quoted or not. Where s is ambiguous
// it masks more than the password. Use it wherever a connection string is shown.
func Redact(s string) string {
	if !isURL(s) {
		return maskFields(s, false)
	}
	scheme := schemeRE.FindString(s)
	rest := s[len(scheme):]
	// The user info ends at the last '@': an unencoded '@' belongs to the password rather than
	// to the host, and masking a query that happens to hold an '@' errs on the safe side.
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		user, _, ok := strings.Cut(rest[:at], ":")
		switch {
		case !ok && (strings.HasPrefix(rest, "/") || !pgScheme(scheme)):
			// "alice://pw@host": what looks like a scheme may be the user name, and the
			// password start with "//". Only PostgreSQL's schemes are taken at their word.
			scheme, rest = strings.TrimSuffix(scheme, "//"), Mask+rest[at:]
		case ok:
			if strings.ContainsAny(user, "/?#") {
				// The ':' is past the authority (host:port/path?...@): which part is the
				// password cannot be told, so all of it goes.
				rest = Mask + rest[at:]
			} else {
				rest = user + ":" + Mask + rest[at:]
			}
		}
	}
	rest, _ = maskQuery(rest)
	return scheme + rest
}

// maskQuery masks the values of the password parameters in a URL's query and returns them. A
// value runs to the next "&key=": an unencoded '&' inside the password is masked with it.
func maskQuery(s string) (string, []string) {
	var b strings.Builder
	var values []string
	for {
		loc := queryPasswordRE.FindStringIndex(s)
		if loc == nil {
			b.WriteString(s)
			return b.String(), values
		}
		b.WriteString(s[:loc[1]])
		s = s[loc[1]:]
		end := strings.IndexByte(s, '&')
		for end >= 0 {
			next := strings.IndexByte(s[end+1:], '&')
			segment := s[end+1:]
			if next >= 0 {
				segment = segment[:next]
			}
			if strings.Contains(segment, "=") {
				break
			}
			if next < 0 {
				end = -1
			} else {
				end += 1 + next
			}
		}
		if end < 0 {
			end = len(s)
		}
		values = append(values, s[:end])
		b.WriteString(Mask)
		s = s[end:]
	}
}

// pgScheme reports whether s starts with PostgreSQL's URL scheme.
func pgScheme(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// isURL reports whether s is read as a URL: it has a scheme, or it does not start like a
// key=value DSN.
func isURL(s string) bool {
	return schemeRE.MatchString(s) || !kvStartRE.MatchString(s)
}

// Scrub returns text with every password of connString masked: each password as written in
// connString and as decoded from it (percent-encoding, DSN quotes and escapes), the fragments an
// unencoded '@', '/', '?' or '#' splits it into, and any password field of a connection string
// quoted in text. Use it on text that may repeat part of connString, such as a driver's error.
func Scrub(text, connString string) string {
	for _, pw := range passwords(connString) {
		text = strings.ReplaceAll(text, pw, Mask)
	}
	// A fragment too short to look for in free text is still masked where the text quotes it,
	// as a parser quotes the word it stopped at (missing "=" after "de").
	for _, pw := range fragments(connString) {
		for _, q := range []string{`"`, "'", "`"} {
			text = strings.ReplaceAll(text, q+pw+q, q+Mask+q)
		}
	}
	text = embeddedURLRE.ReplaceAllString(text, "${1}:"+Mask+"@")
	return maskFields(text, true)
}

// maskFields masks the value of every password field (password=..., sslpassword=...) in s. In a
// key=value DSN (inText false) an unquoted value ends at white space followed by the next libpq
// key= (isKey), so a password typed with an unescaped space ("password=abc def") is masked whole, as it was
// meant, although libpq would reject it. In free text (inText true) a value also ends at '&' or
// a quote.
func maskFields(s string, inText bool) string {
	var b strings.Builder
	last := 0
	for _, span := range passwordSpans(s, inText) {
		b.WriteString(s[last:span[0]])
		b.WriteString(Mask)
		last = span[1]
	}
	b.WriteString(s[last:])
	return b.String()
}

// passwordSpans returns the [start, end) byte ranges of the password values in s (see
// maskFields).
func passwordSpans(s string, inText bool) [][2]int {
	var spans [][2]int
	pos := 0
	for pos < len(s) {
		loc := passwordKeyRE.FindStringIndex(s[pos:])
		if loc == nil {
			break
		}
		start := pos + loc[1]
		end := passwordValueEnd(s, start, inText)
		spans = append(spans, [2]int{start, end})
		pos = max(end, start+1)
	}
	return spans
}

// passwordValueEnd returns where the password value that starts at s[i] ends.
func passwordValueEnd(s string, i int, inText bool) int {
	stop := func(c byte) bool { return inText && strings.IndexByte("&'\"`", c) >= 0 }
	if i < len(s) && s[i] == '\'' {
		// Quoted, with backslash escapes; an unterminated quote runs to the end.
		for j := i + 1; j < len(s); j++ {
			switch s[j] {
			case '\\':
				j++
			case '\'':
				return j + 1
			}
		}
		return len(s)
	}
	for {
		// One word, with backslash escapes.
		for i < len(s) && !isSpace(s[i]) && !stop(s[i]) {
			if s[i] == '\\' {
				i++
			}
			i++
		}
		i = min(i, len(s))
		// The value goes on over white space unless the next word is a key (or text ends).
		j := i
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		if j == i || j == len(s) || stop(s[j]) || isKey(s[j:]) {
			return i
		}
		i = j
	}
}

// isKey reports whether s starts with one of libpq's connection keys and '='. Any other word=
// is taken for more of the password: pgx would pass an unknown key to the server as a run-time
// parameter, but masking it errs on the safe side, while showing a password's "x=y" word does not.
func isKey(s string) bool {
	m := kvKeyRE.FindStringSubmatch(s)
	return m != nil && libpqKeys[strings.ToLower(m[1])]
}

// libpqKeys are the connection keys of libpq and pgx.
var libpqKeys = func() map[string]bool {
	keys := make(map[string]bool)
	for _, k := range strings.Fields(`host hostaddr port dbname database user password passfile
		channel_binding connect_timeout client_encoding options application_name
		fallback_application_name keepalives keepalives_idle keepalives_interval keepalives_count
		tcp_user_timeout replication gssencmode sslmode sslnegotiation sslcompression sslcert sslkey
		sslpassword sslcertmode sslrootcert sslcrl sslcrldir sslsni requirepeer require_auth
		ssl_min_protocol_version ssl_max_protocol_version min_protocol_version max_protocol_version
		krbsrvname gsslib gssdelegation service servicefile target_session_attrs load_balance_hosts
		search_path timezone statement_cache_capacity description_cache_capacity
		default_query_exec_mode prefer_simple_protocol`) {
		keys[k] = true
	}
	return keys
}()

func isSpace(c byte) bool { return strings.IndexByte(" \t\n\r\v\f", c) >= 0 }

// ScrubError returns err with its text scrubbed of connString's passwords (see Scrub). The
// result unwraps to err, so errors.Is and errors.As classify it as before; nil stays nil.
func ScrubError(err error, connString string) error {
	if err == nil {
		return nil
	}
	return &scrubbedError{msg: Scrub(err.Error(), connString), err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// passwords lists what connString may hold as a password, longest first, each at least
// minScrub bytes long.
func passwords(connString string) []string {
	out := slices.DeleteFunc(candidates(connString), func(pw string) bool { return len(pw) < minScrub || pw == Mask })
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b)) })
	return slices.Compact(out)
}

// candidates lists what connString may hold as a password, as typed and decoded, of any length.
func candidates(connString string) []string {
	var raw []string
	if isURL(connString) {
		rest := connString[len(schemeRE.FindString(connString)):]
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				raw = append(raw, pw)
				// libpq reads the user info up to the first '@' and the authority up to the
				// first '/', so an unencoded separator leaves pieces of the password in the
				// host, port, database name or query.
				raw = append(raw, strings.FieldsFunc(pw, func(r rune) bool { return strings.ContainsRune("@/?#:&=", r) })...)
			}
			if strings.HasPrefix(rest, "/") || !pgScheme(connString) {
				// "alice://pw@host": what looks like a scheme may be the user name.
				_, pw, _ := strings.Cut(connString[:len(connString)-len(rest)+at], ":")
				raw = append(raw, pw)
			}
		}
		_, values := maskQuery(rest)
		for _, v := range values {
			raw = append(raw, v)
			raw = append(raw, strings.Split(v, "&")...)
		}
	} else {
		for _, span := range passwordSpans(connString, false) {
			raw = append(raw, connString[span[0]:span[1]])
		}
	}
	// A password with white space, unquoted, reaches a parser as several words.
	for _, pw := range slices.Clone(raw) {
		raw = append(raw, strings.Fields(pw)...)
	}
	var out []string
	for _, pw := range raw {
		out = append(out, pw, unquote(pw))
		if dec, err := url.PathUnescape(pw); err == nil {
			out = append(out, dec)
		}
		if dec, err := url.QueryUnescape(pw); err == nil {
			out = append(out, dec)
		}
	}
	return out
}

// fragments lists the words of connString's passwords (split at white space and at the
// separators an unencoded password is cut at), of any length.
func fragments(connString string) []string {
	var out []string
	for _, pw := range candidates(connString) {
		out = append(out, pw)
		out = append(out, strings.FieldsFunc(pw, func(r rune) bool {
			return unicode.IsSpace(r) || strings.ContainsRune("@/?#:&=", r)
		})...)
	}
	out = slices.DeleteFunc(out, func(pw string) bool { return pw == "" || pw == Mask })
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(cmp.Compare(len(b), len(a)), strings.Compare(a, b)) })
	return slices.Compact(out)
}

// unquote decodes a key=value DSN value: surrounding single quotes go, and a backslash keeps the
// character after it.
func unquote(v string) string {
	if len(v) >= 1 && v[0] == '\'' {
		v = strings.TrimSuffix(v[1:], "'")
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
