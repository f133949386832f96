package posture

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/kafkaconn"
)

// Posture says how one connection is protected, as the configuration decides it: logged at
// start, printed by `cdc check`, and, when TLS is required, a configuration problem when
// Refused says so.
type Posture struct {
	Conn string // "PostgreSQL", "target PostgreSQL", "Kafka", ...
	// Mode names the posture: for PostgreSQL the sslmode it amounts to (disable, allow,
	// prefer, require, verify-ca, verify-full) or "socket"; for Kafka "tls" or "plaintext".
	Mode string
	// Encrypted is "always", "never", or "if the server offers it" (and the like).
	Encrypted string
	// Verified is "full" (certificate and host name), "chain" (certificate, not the host
	// name) or "none".
	Verified string
	Summary  string // one line for people
	// Warning is what is at risk ("" when nothing); Fix what to change; Var the variable.
	Warning, Fix, Var string
	// Required marks a posture that requiring TLS refuses even without a Warning (Kafka in
	// plaintext without credentials).
	Required bool
}

// PGFix is the advice for any PostgreSQL posture short of verify-full; variable is the
// connection string's variable.
func PGFix(variable string) string {
	return "add sslmode=verify-full and sslrootcert=<CA file> to " + variable + " (URL: ?sslmode=verify-full&sslrootcert=/path/ca.pem)"
}

// PG classifies pgx's parsed configuration of the connection conn ("PostgreSQL"), read from
// variable (CDC_PG_URL). pgx turns sslmode into a list of attempts (the first host, then its
// fallbacks): a nil TLSConfig is a plaintext attempt; InsecureSkipVerify without
// VerifyPeerCertificate verifies nothing; with it (verify-ca, or require with sslrootcert) the
// chain but not the host name; neither set is full verification.
func PG(cfg *pgconn.Config, conn, variable string) Posture {
	type attempt struct {
		host string
		tls  *tls.Config
	}
	attempts := []attempt{{cfg.Host, cfg.TLSConfig}}
	for _, fb := range cfg.Fallbacks {
		attempts = append(attempts, attempt{fb.Host, fb.TLSConfig})
	}
	p := Posture{Conn: conn, Var: variable, Fix: PGFix(variable)}
	var network []attempt
	for _, a := range attempts {
		if !strings.HasPrefix(a.host, "/") { // a Unix socket directory
			network = append(network, a)
		}
	}
	if len(network) == 0 {
		p.Mode, p.Encrypted, p.Verified, p.Fix = "socket", "never", "none", ""
		p.Summary = conn + ": local Unix socket, no network (TLS not used)"
		return p
	}
	plainFirst := network[0].tls == nil
	var plain, encrypted bool
	verified := "full"
	for _, a := range network {
		switch {
		case a.tls == nil:
			plain = true
			continue
		case a.tls.InsecureSkipVerify && a.tls.VerifyPeerCertificate == nil:
			verified = "none"
		case a.tls.InsecureSkipVerify && verified == "full":
			verified = "chain"
		}
		encrypted = true
	}
	switch {
	case !encrypted:
		p.Mode, p.Encrypted, p.Verified = "disable", "never", "none"
		p.Summary = conn + ": not encrypted (sslmode=disable)"
		p.Warning = "data and credentials cross the network in plaintext"
	case plain && plainFirst:
		p.Mode, p.Encrypted, p.Verified = "allow", "only if the server insists", "none"
		p.Summary = conn + ": not encrypted unless the server insists, server not verified (sslmode=allow)"
		p.Warning = "data and credentials cross the network in plaintext"
	case plain:
		p.Mode, p.Encrypted, p.Verified = "prefer", "if the server offers it", "none"
		p.Summary = conn + ": encrypted only if the server offers TLS, else plaintext; server certificate not verified (sslmode=prefer, the default)"
		p.Warning = "anyone in the path can impersonate the server or force plaintext"
	case verified == "none":
		p.Mode, p.Encrypted, p.Verified = "require", "always", "none"
		p.Summary = conn + ": encrypted, server certificate not verified (sslmode=require)"
		p.Warning = "anyone in the path can impersonate the server"
	case verified == "chain":
		p.Mode, p.Encrypted, p.Verified = "verify-ca", "always", "chain"
		p.Summary = conn + ": encrypted, certificate verified against sslrootcert but not the host name (sslmode=verify-ca, or require with sslrootcert)"
		p.Warning = "any server with a certificate from the same CA is accepted"
	default:
		p.Mode, p.Encrypted, p.Verified, p.Fix = "verify-full", "always", "full", ""
		p.Summary = conn + ": encrypted, certificate and host name verified (sslmode=verify-full)"
	}
	return p
}

// Loopback reports whether every host cfg may connect to is a Unix socket, "localhost" or a
// loopback address: nothing of such a connection crosses the network.
func Loopback(cfg *pgconn.Config) bool {
	hosts := []string{cfg.Host}
	for _, fb := range cfg.Fallbacks {
		hosts = append(hosts, fb.Host)
	}
	for _, h := range hosts {
		if strings.HasPrefix(h, "/") || strings.EqualFold(h, "localhost") {
			continue
		}
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// Kafka classifies the Kafka security settings. TLS always verifies the brokers (it cannot be
// turned off), so the question is only whether TLS is on, and whether credentials cross the
// network without it.
func Kafka(s kafkaconn.Security) Posture {
	p := Posture{Conn: "Kafka", Var: "CDC_KAFKA_TLS"}
	auth := "no SASL authentication"
	if s.SASLMechanism != "" {
		auth = "SASL " + s.SASLMechanism
	}
	if s.TLS {
		p.Mode, p.Encrypted, p.Verified = "tls", "always", "full"
		roots := "the system roots"
		if s.CAFile != "" {
			roots = "CDC_KAFKA_TLS_CA_FILE"
		}
		name := "the broker's host name"
		if s.ServerName != "" {
			name = s.ServerName
		}
		p.Summary = fmt.Sprintf("Kafka: encrypted, brokers' certificates verified against %s for %s; %s", roots, clip(name), auth)
		return p
	}
	p.Mode, p.Encrypted, p.Verified, p.Required = "plaintext", "never", "none", true
	p.Summary = "Kafka: not encrypted (CDC_KAFKA_TLS=false); " + auth
	p.Fix = "use the brokers' TLS listener in CDC_KAFKA_BROKERS and set CDC_KAFKA_TLS=true (with CDC_KAFKA_TLS_CA_FILE for a private CA)"
	if s.SASLMechanism != "" {
		p.Var = "CDC_KAFKA_SASL_MECHANISM"
		if s.SASLMechanism == kafkaconn.SASLPlain || s.SASLMechanism == kafkaconn.SASLOAuthBearer {
			p.Warning = fmt.Sprintf("the %s credentials cross the network in plaintext", s.SASLMechanism)
		} else {
			p.Warning = fmt.Sprintf("the %s exchange and all data cross the network in plaintext", s.SASLMechanism)
		}
	}
	return p
}

// clip shortens a configured name for a log line, as cdc's problems quote a value: at most
// 64 bytes, cut at a character's start.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	end := n
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:end], len(s))
}

// Refused says why requireVar=true (CDC_REQUIRE_TLS, APPLY_REQUIRE_TLS) refuses p: every
// posture with a Warning, and the Required ones. "" when p is accepted.
func Refused(p Posture, requireVar string) string {
	if p.Warning == "" && !p.Required {
		return ""
	}
	what := lowerFirst(strings.TrimPrefix(p.Summary, p.Conn+": "), p.Conn)
	if p.Warning != "" {
		what += ": " + p.Warning
	}
	return fmt.Sprintf("%s=true, but %s; fix: %s", requireVar, what, p.Fix)
}

// lowerFirst names the connection before its summary: "PostgreSQL is not encrypted (...)".
func lowerFirst(summary, conn string) string {
	if strings.HasPrefix(summary, "not ") || strings.HasPrefix(summary, "encrypted") {
		return conn + " is " + summary
	}
	return conn + ": " + summary
}

// Log logs each connection's posture at start: a warning, with the fix, for each that has one,
// else one informational line.
func Log(log *slog.Logger, postures []Posture) {
	for _, p := range postures {
		attrs := []any{"connection", p.Conn, "mode", p.Mode, "encrypted", p.Encrypted, "verified", p.Verified}
		if p.Warning != "" {
			log.Warn(p.Summary+": "+p.Warning, append(attrs, "fix", p.Fix)...)
			continue
		}
		log.Info(p.Summary, attrs...)
	}
}
