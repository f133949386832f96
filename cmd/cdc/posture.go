package main

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/pkg/sink"
)

// tlsPosture says how one connection is protected, as the configuration decides it: logged at
// start, printed by `cdc check`, and with CDC_REQUIRE_TLS=true an error when Warning is set.
type tlsPosture struct {
	Conn string // "PostgreSQL" or "Kafka"
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
	// Required marks a posture that CDC_REQUIRE_TLS=true refuses even without a Warning
	// (Kafka in plaintext without credentials).
	Required bool
}

// pgVerifyFix is the advice for any PostgreSQL posture short of verify-full.
const pgVerifyFix = "add sslmode=verify-full and sslrootcert=<CA file> to CDC_PG_URL (URL: ?sslmode=verify-full&sslrootcert=/path/ca.pem)"

// pgPosture classifies pgx's parsed configuration. pgx turns sslmode into a list of attempts
// (the first host, then its fallbacks): a nil TLSConfig is a plaintext attempt; InsecureSkipVerify
// without VerifyPeerCertificate verifies nothing; with it (verify-ca, or require with
// sslrootcert) the chain but not the host name; neither set is full verification.
func pgPosture(cfg *pgconn.Config) tlsPosture {
	type attempt struct {
		host string
		tls  *tls.Config
	}
	attempts := []attempt{{cfg.Host, cfg.TLSConfig}}
	for _, fb := range cfg.Fallbacks {
		attempts = append(attempts, attempt{fb.Host, fb.TLSConfig})
	}
	p := tlsPosture{Conn: "PostgreSQL", Var: "CDC_PG_URL", Fix: pgVerifyFix}
	var network []attempt
	for _, a := range attempts {
		if !strings.HasPrefix(a.host, "/") { // a Unix socket directory
			network = append(network, a)
		}
	}
	if len(network) == 0 {
		p.Mode, p.Encrypted, p.Verified, p.Fix = "socket", "never", "none", ""
		p.Summary = "PostgreSQL: local Unix socket, no network (TLS not used)"
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
		p.Summary = "PostgreSQL: not encrypted (sslmode=disable)"
		p.Warning = "data and credentials cross the network in plaintext"
	case plain && plainFirst:
		p.Mode, p.Encrypted, p.Verified = "allow", "only if the server insists", "none"
		p.Summary = "PostgreSQL: not encrypted unless the server insists, server not verified (sslmode=allow)"
		p.Warning = "data and credentials cross the network in plaintext"
	case plain:
		p.Mode, p.Encrypted, p.Verified = "prefer", "if the server offers it", "none"
		p.Summary = "PostgreSQL: encrypted only if the server offers TLS, else plaintext; server certificate not verified (sslmode=prefer, the default)"
		p.Warning = "anyone in the path can impersonate the server or force plaintext"
	case verified == "none":
		p.Mode, p.Encrypted, p.Verified = "require", "always", "none"
		p.Summary = "PostgreSQL: encrypted, server certificate not verified (sslmode=require)"
		p.Warning = "anyone in the path can impersonate the server"
	case verified == "chain":
		p.Mode, p.Encrypted, p.Verified = "verify-ca", "always", "chain"
		p.Summary = "PostgreSQL: encrypted, certificate verified against sslrootcert but not the host name (sslmode=verify-ca, or require with sslrootcert)"
		p.Warning = "any server with a certificate from the same CA is accepted"
	default:
		p.Mode, p.Encrypted, p.Verified, p.Fix = "verify-full", "always", "full", ""
		p.Summary = "PostgreSQL: encrypted, certificate and host name verified (sslmode=verify-full)"
	}
	return p
}

// primaryPosture is pgPosture for CDC_PG_PRIMARY_URL, the connection to a standby's primary.
func primaryPosture(cfg *pgconn.Config) tlsPosture {
	p := pgPosture(cfg)
	p.Conn, p.Var = "PostgreSQL primary", "CDC_PG_PRIMARY_URL"
	p.Summary = strings.Replace(p.Summary, "PostgreSQL:", "PostgreSQL primary (CDC_PG_PRIMARY_URL):", 1)
	p.Fix = strings.Replace(p.Fix, "CDC_PG_URL", "CDC_PG_PRIMARY_URL", 1)
	return p
}

// kafkaPosture classifies the Kafka security settings. TLS always verifies the brokers (it
// cannot be turned off), so the question is only whether TLS is on, and whether credentials
// cross the network without it.
func kafkaPosture(s sink.Security) tlsPosture {
	p := tlsPosture{Conn: "Kafka", Var: "CDC_KAFKA_TLS"}
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
		p.Summary = fmt.Sprintf("Kafka: encrypted, brokers' certificates verified against %s for %s; %s", roots, cut(name), auth)
		return p
	}
	p.Mode, p.Encrypted, p.Verified, p.Required = "plaintext", "never", "none", true
	p.Summary = "Kafka: not encrypted (CDC_KAFKA_TLS=false); " + auth
	p.Fix = "use the brokers' TLS listener in CDC_KAFKA_BROKERS and set CDC_KAFKA_TLS=true (with CDC_KAFKA_TLS_CA_FILE for a private CA)"
	if s.SASLMechanism != "" {
		p.Var = "CDC_KAFKA_SASL_MECHANISM"
		if s.SASLMechanism == sink.SASLPlain || s.SASLMechanism == sink.SASLOAuthBearer {
			p.Warning = fmt.Sprintf("the %s credentials cross the network in plaintext", s.SASLMechanism)
		} else {
			p.Warning = fmt.Sprintf("the %s exchange and all data cross the network in plaintext", s.SASLMechanism)
		}
	}
	return p
}

// tlsPostures classifies both connections (PostgreSQL only when its configuration parsed) and,
// with CDC_REQUIRE_TLS=true, reports every one that is not encrypted and verified as a problem.
func (c *checker) tlsPostures(requireTLS string, pg, primary *pgconn.Config, kafka sink.Security) []tlsPosture {
	require := c.boolean("CDC_REQUIRE_TLS", requireTLS)
	var out []tlsPosture
	if pg != nil {
		out = append(out, pgPosture(pg))
	}
	if primary != nil {
		out = append(out, primaryPosture(primary))
	}
	out = append(out, kafkaPosture(kafka))
	if !require {
		return out
	}
	for _, p := range out {
		if p.Warning == "" && !p.Required {
			continue
		}
		what := lowerFirst(strings.TrimPrefix(p.Summary, p.Conn+": "), p.Conn)
		if p.Warning != "" {
			what += ": " + p.Warning
		}
		c.add(p.Var, "", "CDC_REQUIRE_TLS=true, but %s; fix: %s", what, p.Fix)
	}
	return out
}

// lowerFirst names the connection before its summary: "PostgreSQL is not encrypted (...)".
func lowerFirst(summary, conn string) string {
	if strings.HasPrefix(summary, "not ") || strings.HasPrefix(summary, "encrypted") {
		return conn + " is " + summary
	}
	return conn + ": " + summary
}

// logPostures logs each connection's posture at start: a warning, with the fix, for each that
// is not encrypted and verified.
func logPostures(log *slog.Logger, postures []tlsPosture) {
	for _, p := range postures {
		attrs := []any{"connection", p.Conn, "mode", p.Mode, "encrypted", p.Encrypted, "verified", p.Verified}
		if p.Warning != "" {
			log.Warn(p.Summary+": "+p.Warning, append(attrs, "fix", p.Fix)...)
			continue
		}
		log.Info(p.Summary, attrs...)
	}
}
