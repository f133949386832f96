package schemareg

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/tidemark/cdc/pkg/conffile"
)

// Config is how a Client reaches the registry. The zero value of every field but URL is a
// useful default.
type Config struct {
	// URL is the base URL of the registry's API, http:// or https:// (for Apicurio Registry,
	// https://host:port/apis/ccompat/v7). It may not carry user info.
	URL string
	// Username and Password are HTTP basic auth, sent with every request when Username is set.
	// Password is a secret: it is never logged or quoted in an error.
	Username, Password string
	// CAFile (PEM) replaces the system roots that the registry's certificate is verified
	// against; ServerName replaces the URL's host as the name it must be valid for; CertFile
	// and KeyFile (PEM) are the client certificate of mutual TLS. All need an https:// URL.
	CAFile, ServerName, CertFile, KeyFile string
	// RequestTimeout bounds one HTTP request [10s].
	RequestTimeout time.Duration
	// RetryMin and RetryMax bound the backoff between attempts when the registry cannot be
	// reached [200ms, 10s]: it doubles from RetryMin up to RetryMax, with jitter.
	RetryMin, RetryMax time.Duration
	// Logger receives a warning for each failed attempt that is retried [discarded].
	Logger *slog.Logger
}

// Defaults of Config's zero fields.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultRetryMin       = 200 * time.Millisecond
	DefaultRetryMax       = 10 * time.Second
)

// LogValue logs the configuration without the password.
func (c Config) LogValue() slog.Value {
	password := "unset"
	if c.Password != "" {
		password = "set"
	}
	return slog.GroupValue(
		slog.String("url", c.URL),
		slog.String("username", c.Username),
		slog.String("password", password),
		slog.String("ca_file", c.CAFile),
		slog.String("cert_file", c.CertFile),
		slog.String("server_name", c.ServerName),
	)
}

// String is LogValue's text, so that %v of a Config never prints the password.
func (c Config) String() string { return c.LogValue().String() }

// TLS reports whether the client speaks TLS to the registry (an https:// URL).
func (c Config) TLS() bool {
	u, err := url.Parse(c.URL)
	return err == nil && strings.EqualFold(u.Scheme, "https")
}

// Warning says what a plaintext connection puts at risk, "" when nothing does: TLS, or a
// registry on the loopback interface.
func (c Config) Warning() string {
	u, err := url.Parse(c.URL)
	if err != nil || c.TLS() || loopback(u.Hostname()) {
		return ""
	}
	if c.Password != "" {
		return "the schema registry's basic-auth password and the schemas cross the network in plaintext: use its https:// URL in CDC_SCHEMA_REGISTRY_URL"
	}
	return "the schemas cross the network in plaintext, and anyone in the path can answer for the registry: use its https:// URL in CDC_SCHEMA_REGISTRY_URL"
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tlsConfig builds the TLS configuration of an https:// URL, reading the certificate files now
// (a missing or malformed one is an error here, naming the file); nil for http://.
func (c Config) tlsConfig() (*tls.Config, error) {
	if !c.TLS() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := conffile.Read(c.CAFile, conffile.MaxSize)
		if err != nil {
			return nil, fmt.Errorf("schema registry TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("schema registry TLS CA file %s holds no PEM certificate", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := loadKeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("schema registry TLS client certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// loadKeyPair is tls.LoadX509KeyPair through conffile: neither file may block or be huge.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := conffile.Read(certFile, conffile.MaxSize)
	if err != nil {
		return tls.Certificate{}, err
	}
	key, err := conffile.Read(keyFile, conffile.MaxSize)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(cert, key)
}

// Env is the raw text of the CDC_SCHEMA_REGISTRY_* variables.
type Env struct {
	URL, Username, Password               string
	CAFile, CertFile, KeyFile, ServerName string
}

// ReadEnv reads the variables through getenv, white space trimmed.
func ReadEnv(getenv func(string) string) Env {
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }
	return Env{
		URL: get("CDC_SCHEMA_REGISTRY_URL"), Username: get("CDC_SCHEMA_REGISTRY_USERNAME"),
		Password: get("CDC_SCHEMA_REGISTRY_PASSWORD"), CAFile: get("CDC_SCHEMA_REGISTRY_TLS_CA_FILE"),
		CertFile: get("CDC_SCHEMA_REGISTRY_TLS_CERT_FILE"), KeyFile: get("CDC_SCHEMA_REGISTRY_TLS_KEY_FILE"),
		ServerName: get("CDC_SCHEMA_REGISTRY_TLS_SERVER_NAME"),
	}
}

// Set reports whether a registry is configured (CDC_SCHEMA_REGISTRY_URL).
func (v Env) Set() bool { return v.URL != "" }

// Problem is one problem with one variable. Value is the variable's value to show (never the
// password's), "" for none.
type Problem struct {
	Name, Value, Msg string
}

func (p Problem) Error() string {
	if p.Value == "" {
		return p.Name + ": " + p.Msg
	}
	return fmt.Sprintf("%s=%q: %s", p.Name, p.Value, p.Msg)
}

// Config checks the variables together and returns the Config they describe, with every problem
// found. Without CDC_SCHEMA_REGISTRY_URL, any other of the variables is a problem.
func (v Env) Config() (Config, []Problem) {
	var problems []Problem
	add := func(name, value, format string, args ...any) {
		problems = append(problems, Problem{Name: name, Value: value, Msg: fmt.Sprintf(format, args...)})
	}
	c := Config{URL: v.URL, Username: v.Username, Password: v.Password, CAFile: v.CAFile,
		CertFile: v.CertFile, KeyFile: v.KeyFile, ServerName: v.ServerName}
	others := []struct{ name, value string }{{"CDC_SCHEMA_REGISTRY_USERNAME", v.Username},
		{"CDC_SCHEMA_REGISTRY_PASSWORD", v.Password}, {"CDC_SCHEMA_REGISTRY_TLS_CA_FILE", v.CAFile},
		{"CDC_SCHEMA_REGISTRY_TLS_CERT_FILE", v.CertFile}, {"CDC_SCHEMA_REGISTRY_TLS_KEY_FILE", v.KeyFile},
		{"CDC_SCHEMA_REGISTRY_TLS_SERVER_NAME", v.ServerName}}
	if v.URL == "" {
		for _, o := range others {
			if o.value != "" {
				add(o.name, "", "is set, but CDC_SCHEMA_REGISTRY_URL is not: set the registry's URL, or unset it")
			}
		}
		return c, problems
	}
	shown := clip(v.URL)
	if strings.Contains(v.URL, "@") {
		shown = "" // it may hold a password, even when it does not parse
	}
	u, err := url.Parse(v.URL)
	switch {
	case err != nil:
		add("CDC_SCHEMA_REGISTRY_URL", shown, "is not a URL: want http(s)://host[:port][/path]")
		return c, problems
	case u.User != nil:
		// The value is not echoed: it holds a password.
		add("CDC_SCHEMA_REGISTRY_URL", "", "carries user info: move the user name and password to CDC_SCHEMA_REGISTRY_USERNAME and CDC_SCHEMA_REGISTRY_PASSWORD")
	case !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"):
		add("CDC_SCHEMA_REGISTRY_URL", shown, "want an http:// or https:// URL")
	case u.Host == "":
		add("CDC_SCHEMA_REGISTRY_URL", shown, "names no host: want http(s)://host[:port][/path]")
	case u.RawQuery != "" || u.Fragment != "":
		add("CDC_SCHEMA_REGISTRY_URL", shown, "has a query or fragment: give the base URL of the API only")
	case strings.EqualFold(u.Scheme, "http"):
		var tlsVars []string
		for _, o := range others[2:] {
			if o.value != "" {
				tlsVars = append(tlsVars, o.name)
			}
		}
		if len(tlsVars) > 0 {
			add("CDC_SCHEMA_REGISTRY_URL", shown, "is http://, but %s configure TLS: use the registry's https:// URL, or unset them",
				strings.Join(tlsVars, " and "))
		}
	}
	if (v.Username == "") != (v.Password == "") {
		add("CDC_SCHEMA_REGISTRY_USERNAME", "", "and CDC_SCHEMA_REGISTRY_PASSWORD go together: set both for basic auth, or neither")
	}
	for _, f := range []struct{ name, path string }{{"CDC_SCHEMA_REGISTRY_TLS_CA_FILE", v.CAFile},
		{"CDC_SCHEMA_REGISTRY_TLS_CERT_FILE", v.CertFile}, {"CDC_SCHEMA_REGISTRY_TLS_KEY_FILE", v.KeyFile}} {
		if f.path == "" {
			continue
		}
		// A FIFO or a device named as a certificate would hang the start: conffile checks
		// without blocking.
		if err := conffile.Check(f.path, conffile.MaxSize); err != nil {
			if fe, ok := errors.AsType[*conffile.Error](err); ok {
				add(f.name, "", "%s %s", clip(fe.Path), fe.Msg)
			} else {
				add(f.name, "", "%s: %v", clip(f.path), err)
			}
		}
	}
	if (v.CertFile == "") != (v.KeyFile == "") {
		add("CDC_SCHEMA_REGISTRY_TLS_CERT_FILE", "", "and CDC_SCHEMA_REGISTRY_TLS_KEY_FILE go together: set both for mutual TLS, or neither")
	}
	return c, problems
}

// clip shortens a value echoed in a problem to a readable length.
func clip(s string) string {
	const limit = 512
	if len(s) <= limit {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(s[:limit], ""), len(s))
}
