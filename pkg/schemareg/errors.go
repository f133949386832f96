package schemareg

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"

	"github.com/twmb/franz-go/pkg/sr"
)

var (
	// ErrUnauthorized: the registry refused the credentials (HTTP 401 or 403).
	ErrUnauthorized = errors.New("the schema registry refused the credentials")
	// ErrNotFound: the registry does not know the schema id.
	ErrNotFound = errors.New("not in the schema registry")
	// ErrTLS: the TLS handshake with the registry failed on the settings, not the network (its
	// certificate did not verify, it refused the client's, or it does not speak TLS there);
	// retrying cannot help. The error's text names the CDC_SCHEMA_REGISTRY_* variable to fix.
	ErrTLS = errors.New("TLS with the schema registry failed")
)

// tlsError is an explained TLS failure: its text says what to fix; it is ErrTLS and wraps the
// handshake's error.
type tlsError struct {
	msg string
	err error
}

func (e *tlsError) Error() string   { return e.msg }
func (e *tlsError) Unwrap() []error { return []error{ErrTLS, e.err} }

// tlsErrorf is a tlsError whose text is format's with err appended in parentheses.
func tlsErrorf(err error, format string, args ...any) error {
	return &tlsError{msg: fmt.Sprintf(format, args...) + " (" + err.Error() + ")", err: err}
}

// IncompatibleError is a schema that the registry refused under the subject's compatibility
// rules (HTTP 409). It is permanent for that schema: retrying cannot change the answer.
type IncompatibleError struct {
	Subject string
	// Level is the compatibility level that refused it; zero when the registry did not say.
	Level sr.CompatibilityLevel
	// Reason is the registry's own explanation.
	Reason string
	err    error
}

func (e *IncompatibleError) Error() string {
	level := "its compatibility level"
	if e.Level != 0 {
		level = "its compatibility level " + e.Level.String()
	}
	return fmt.Sprintf("the schema registry refused the new schema of subject %q as incompatible with %s (%s); "+
		"fix: make the change one that level accepts (for BACKWARD: new fields with a default, no field removed "+
		"without one, no type changed), or, once every consumer of the topic can read the new shape, set the "+
		"subject's level to one that accepts it (PUT /config/%s with {\"compatibility\":\"NONE\"}), "+
		"or write the table to a new topic", e.Subject, level, e.Reason, e.Subject)
}

func (e *IncompatibleError) Unwrap() error { return e.err }

// transient reports whether err is worth retrying: the registry was not reached, or answered
// that it cannot serve now (5xx, 408, 429). TLS verification failures are not transient.
func transient(err error) bool {
	if re, ok := errors.AsType[*sr.ResponseError](err); ok {
		return re.StatusCode >= 500 || re.StatusCode == http.StatusRequestTimeout ||
			re.StatusCode == http.StatusTooManyRequests
	}
	return !tlsFailure(err)
}

func tlsFailure(err error) bool {
	var (
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalid    x509.CertificateInvalidError
		recordErr  tls.RecordHeaderError
		verifyErr  *tls.CertificateVerificationError
		alertError tls.AlertError
	)
	return errors.As(err, &unknownCA) || errors.As(err, &hostErr) || errors.As(err, &invalid) ||
		errors.As(err, &recordErr) || errors.As(err, &verifyErr) || errors.As(err, &alertError) ||
		tlsAlert(err) || errors.Is(err, http.ErrSchemeMismatch)
}

// tlsAlert reports whether the server ended the TLS handshake with an alert (crypto/tls returns
// it as a *net.OpError of Op "remote error"): it refused the client's certificate, or its lack.
func tlsAlert(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error"
}

// explain turns the usual configuration mistakes into a sentence that says what to fix; other
// errors are returned as they are.
func (c *Client) explain(err error) error {
	var (
		unknownCA x509.UnknownAuthorityError
		hostErr   x509.HostnameError
		recordErr tls.RecordHeaderError
	)
	if re, ok := errors.AsType[*sr.ResponseError](err); ok {
		if re.StatusCode == http.StatusUnauthorized || re.StatusCode == http.StatusForbidden {
			return fmt.Errorf("%w (HTTP %d): check CDC_SCHEMA_REGISTRY_USERNAME and CDC_SCHEMA_REGISTRY_PASSWORD, and the user's rights: %w",
				ErrUnauthorized, re.StatusCode, err)
		}
		// The request's URL carries no credentials (Config refuses user info).
		return fmt.Errorf("HTTP %d to %s %s: %w", re.StatusCode, re.Method, re.URL, err)
	}
	switch {
	case errors.As(err, &unknownCA):
		return tlsErrorf(err, "the schema registry's TLS certificate is signed by an authority not in CDC_SCHEMA_REGISTRY_TLS_CA_FILE or the system's roots: set CDC_SCHEMA_REGISTRY_TLS_CA_FILE to the CA that signed it")
	case errors.As(err, &hostErr):
		return tlsErrorf(err, "the schema registry's TLS certificate is not valid for %q: set CDC_SCHEMA_REGISTRY_TLS_SERVER_NAME to a name it is valid for, or use that name in CDC_SCHEMA_REGISTRY_URL", hostErr.Host)
	case errors.As(err, &recordErr) || errors.Is(err, http.ErrSchemeMismatch):
		return tlsErrorf(err, "the schema registry does not speak TLS there: use its http:// URL, or its TLS port, in CDC_SCHEMA_REGISTRY_URL")
	case tlsAlert(err):
		return tlsErrorf(err, "the schema registry refused the TLS handshake, most often for want of a client certificate it trusts: set CDC_SCHEMA_REGISTRY_TLS_CERT_FILE and CDC_SCHEMA_REGISTRY_TLS_KEY_FILE to one")
	}
	return err
}
