package kafkaconn

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidemark/cdc/pkg/conffile"
)

// SecurityEnv is the raw text of the CDC_KAFKA_TLS* and CDC_KAFKA_SASL* variables. Every
// Tidemark command that talks to Kafka (cdc, tidemark-tail) reads the same variables and checks
// them here, so they mean the same everywhere.
type SecurityEnv struct {
	TLS, CAFile, CertFile, KeyFile, ServerName      string
	Mechanism, Username, Password, Token, TokenFile string
}

// ReadSecurityEnv reads the variables through getenv, white space trimmed.
func ReadSecurityEnv(getenv func(string) string) SecurityEnv {
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	return SecurityEnv{
		TLS: get("CDC_KAFKA_TLS"), CAFile: get("CDC_KAFKA_TLS_CA_FILE"), CertFile: get("CDC_KAFKA_TLS_CERT_FILE"),
		KeyFile: get("CDC_KAFKA_TLS_KEY_FILE"), ServerName: get("CDC_KAFKA_TLS_SERVER_NAME"),
		Mechanism: get("CDC_KAFKA_SASL_MECHANISM"), Username: get("CDC_KAFKA_SASL_USERNAME"),
		Password: get("CDC_KAFKA_SASL_PASSWORD"), Token: get("CDC_KAFKA_SASL_OAUTH_TOKEN"),
		TokenFile: get("CDC_KAFKA_SASL_OAUTH_TOKEN_FILE"),
	}
}

// EnvProblem is one problem with one variable. Value is the variable's value to show (never a
// secret's), "" for none.
type EnvProblem struct {
	Name, Value, Msg string
}

func (p EnvProblem) Error() string {
	if p.Value == "" {
		return p.Name + ": " + p.Msg
	}
	return fmt.Sprintf("%s=%q: %s", p.Name, p.Value, p.Msg)
}

// Security checks the variables together and returns the Security they describe, with every
// problem found. An empty TLS is false and an empty Mechanism none.
func (v SecurityEnv) Security() (Security, []EnvProblem) {
	var problems []EnvProblem
	add := func(name, value, format string, args ...any) {
		problems = append(problems, EnvProblem{Name: name, Value: value, Msg: fmt.Sprintf(format, args...)})
	}
	s := Security{
		CAFile: v.CAFile, CertFile: v.CertFile, KeyFile: v.KeyFile, ServerName: v.ServerName,
		Username: v.Username, Password: v.Password, Token: v.Token, TokenFile: v.TokenFile,
	}
	switch strings.ToLower(v.TLS) {
	case "true", "1", "yes":
		s.TLS = true
	case "false", "0", "no", "":
	default:
		add("CDC_KAFKA_TLS", v.TLS, "want true or false")
	}
	var tlsVars []string
	for _, f := range []struct{ name, value string }{{"CDC_KAFKA_TLS_CA_FILE", s.CAFile}, {"CDC_KAFKA_TLS_CERT_FILE", s.CertFile},
		{"CDC_KAFKA_TLS_KEY_FILE", s.KeyFile}, {"CDC_KAFKA_TLS_SERVER_NAME", s.ServerName}} {
		if f.value != "" {
			tlsVars = append(tlsVars, f.name)
		}
	}
	if len(tlsVars) > 0 {
		if !s.TLS && v.TLS != "" {
			it, verb := "them", "configure"
			if len(tlsVars) == 1 {
				it, verb = "it", "configures"
			}
			add("CDC_KAFKA_TLS", v.TLS, "turns TLS off, but %s %s TLS: unset %s, or set CDC_KAFKA_TLS=true",
				strings.Join(tlsVars, " and "), verb, it)
		}
		s.TLS = true
	}
	for _, f := range []struct{ name, path string }{{"CDC_KAFKA_TLS_CA_FILE", s.CAFile}, {"CDC_KAFKA_TLS_CERT_FILE", s.CertFile},
		{"CDC_KAFKA_TLS_KEY_FILE", s.KeyFile}, {"CDC_KAFKA_SASL_OAUTH_TOKEN_FILE", s.TokenFile}} {
		if f.path == "" {
			continue
		}
		// A FIFO or a device named as a certificate would hang the start: conffile checks
		// without blocking.
		if err := conffile.Check(f.path, conffile.MaxSize); err != nil {
			if fe, ok := errors.AsType[*conffile.Error](err); ok {
				add(f.name, "", "%s %s", cutPath(fe.Path), fe.Msg)
			} else {
				add(f.name, "", "%s: %v", cutPath(f.path), err)
			}
		}
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		add("CDC_KAFKA_TLS_CERT_FILE", "", "and CDC_KAFKA_TLS_KEY_FILE go together: set both for mutual TLS, or neither")
	}
	mech := strings.ToUpper(v.Mechanism)
	switch mech {
	case "NONE", "":
		mech = ""
		if s.Username != "" || s.Password != "" || s.Token != "" || s.TokenFile != "" {
			add("CDC_KAFKA_SASL_MECHANISM", v.Mechanism, "is none, but SASL credentials are set: choose PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
		}
	case SASLPlain, SASLScramSHA256, SASLScramSHA512:
		if s.Username == "" {
			add("CDC_KAFKA_SASL_USERNAME", "", "is required with %s", mech)
		}
		if s.Password == "" {
			add("CDC_KAFKA_SASL_PASSWORD", "", "is required with %s", mech)
		}
		if s.Token != "" || s.TokenFile != "" {
			add("CDC_KAFKA_SASL_MECHANISM", v.Mechanism, "uses a user name and password, but an OAUTHBEARER token is set too: unset CDC_KAFKA_SASL_OAUTH_TOKEN(_FILE), or set CDC_KAFKA_SASL_MECHANISM=OAUTHBEARER")
		}
	case SASLOAuthBearer:
		if (s.Token == "") == (s.TokenFile == "") {
			add("CDC_KAFKA_SASL_OAUTH_TOKEN", "", "or CDC_KAFKA_SASL_OAUTH_TOKEN_FILE: set exactly one with OAUTHBEARER")
		}
		if s.Username != "" || s.Password != "" {
			add("CDC_KAFKA_SASL_MECHANISM", v.Mechanism, "is OAUTHBEARER, which uses a token, but CDC_KAFKA_SASL_USERNAME or CDC_KAFKA_SASL_PASSWORD is set too: unset them, or choose PLAIN or SCRAM")
		}
	default:
		add("CDC_KAFKA_SASL_MECHANISM", v.Mechanism, "want none, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER")
	}
	s.SASLMechanism = mech
	return s, problems
}

// cutPath shortens a path echoed in a problem to a readable length.
func cutPath(p string) string {
	const limit = 512
	if len(p) <= limit {
		return p
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(p[:limit], ""), len(p))
}
