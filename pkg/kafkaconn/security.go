package kafkaconn

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tidemark/cdc/pkg/conffile"
)

// SASL mechanisms of Security.SASLMechanism.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
	SASLOAuthBearer = "OAUTHBEARER"
)

// Security is how every Kafka client of Tidemark encrypts and authenticates, with franz-go's own
// mechanisms. The zero value is plaintext without authentication.
type Security struct {
	// TLS encrypts the connections and verifies the brokers' certificates: against CAFile
	// (PEM) or the system roots, for ServerName or the host dialled. Verification cannot be
	// turned off.
	TLS        bool
	CAFile     string
	ServerName string
	// CertFile and KeyFile (PEM) are the client certificate of mutual TLS.
	CertFile, KeyFile string
	// SASLMechanism is "" (none), SASLPlain, SASLScramSHA256, SASLScramSHA512 or
	// SASLOAuthBearer. Username and Password serve PLAIN and SCRAM; OAUTHBEARER takes Token, or
	// TokenFile, which is read again whenever it changes (a token rotated by a sidecar).
	SASLMechanism      string
	Username, Password string
	Token, TokenFile   string
}

// ClientOpts returns the client options that apply s. It reads the certificate files now, so a
// missing or malformed one is an error here, naming the file.
func (s Security) ClientOpts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if s.TLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.ServerName}
		if s.CAFile != "" {
			pem, err := conffile.Read(s.CAFile, conffile.MaxSize)
			if err != nil {
				return nil, fmt.Errorf("Kafka TLS CA file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("Kafka TLS CA file %s holds no PEM certificate", s.CAFile)
			}
			cfg.RootCAs = pool
		}
		if s.CertFile != "" || s.KeyFile != "" {
			cert, err := loadKeyPair(s.CertFile, s.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("Kafka TLS client certificate %s and key %s: %w", s.CertFile, s.KeyFile, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		// With ServerName empty, franz-go verifies each broker against the host it dials.
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	switch strings.ToUpper(s.SASLMechanism) {
	case "":
	case SASLPlain:
		opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
	case SASLScramSHA256:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
	case SASLScramSHA512:
		opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
	case SASLOAuthBearer:
		if s.TokenFile == "" {
			opts = append(opts, kgo.SASL(oauth.Auth{Token: s.Token}.AsMechanism()))
			break
		}
		tf := &tokenFile{path: s.TokenFile}
		if _, err := tf.token(); err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			t, err := tf.token()
			return oauth.Auth{Token: t}, err
		})))
	default:
		return nil, fmt.Errorf("unknown SASL mechanism %q", s.SASLMechanism)
	}
	return opts, nil
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

// tokenFile reads an OAUTHBEARER token from a file, again whenever the file changed.
type tokenFile struct {
	path  string
	mu    sync.Mutex
	mod   time.Time
	size  int64
	value string
}

func (f *tokenFile) token() (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, err := os.Stat(f.path)
	if err != nil {
		return "", fmt.Errorf("OAUTHBEARER token file: %w", err)
	}
	if f.value != "" && st.ModTime().Equal(f.mod) && st.Size() == f.size {
		return f.value, nil
	}
	b, err := conffile.Read(f.path, conffile.MaxSize)
	if err != nil {
		return "", fmt.Errorf("OAUTHBEARER token file: %w", err)
	}
	tok := string(bytes.TrimSpace(b))
	if tok == "" {
		return "", fmt.Errorf("OAUTHBEARER token file %s is empty", f.path)
	}
	f.value, f.mod, f.size = tok, st.ModTime(), st.Size()
	return tok, nil
}

// ExplainConnect is Security.explainConnect for callers outside the sink (cdc check).
func ExplainConnect(s Security, err error) error { return s.explainConnect(err) }

// explainConnect turns a failure to reach the brokers into one sentence that says what to fix,
// for the usual TLS and SASL mistakes; other errors are returned as they are.
func (s Security) explainConnect(err error) error {
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var recordErr tls.RecordHeaderError
	switch {
	case errors.As(err, &unknownCA):
		where := "the system's roots"
		if s.CAFile != "" {
			where = "CDC_KAFKA_TLS_CA_FILE (" + s.CAFile + ")"
		}
		return fmt.Errorf("the Kafka brokers' TLS certificate is signed by an authority not in %s: set CDC_KAFKA_TLS_CA_FILE to the CA that signed it (%w)", where, err)
	case errors.As(err, &hostErr):
		return fmt.Errorf("the Kafka brokers' TLS certificate is not valid for %q: set CDC_KAFKA_TLS_SERVER_NAME to a name it is valid for, or connect by that name in CDC_KAFKA_BROKERS (%w)", hostErr.Host, err)
	case errors.As(err, &recordErr):
		return fmt.Errorf("the Kafka listener does not speak TLS: unset CDC_KAFKA_TLS, or use the brokers' TLS listener in CDC_KAFKA_BROKERS (%w)", err)
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("Kafka rejected the %s credentials of user %q: check CDC_KAFKA_SASL_USERNAME and CDC_KAFKA_SASL_PASSWORD (or the OAUTHBEARER token) (%w)", s.SASLMechanism, s.Username, err)
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return fmt.Errorf("the Kafka listener does not accept SASL mechanism %s: set CDC_KAFKA_SASL_MECHANISM to one it accepts (%w)", s.SASLMechanism, err)
	}
	return err
}
