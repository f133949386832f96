package schemareg

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

const (
	schemaV1 = `{"type":"record","name":"row","fields":[{"name":"id","type":"int"}]}`
	schemaV2 = `{"type":"record","name":"row","fields":[{"name":"id","type":"int"},{"name":"note","type":["null","string"],"default":null}]}`
)

// counter counts the requests of a fake registry by "METHOD path" and lets them through.
type counter struct{ n map[string]*atomic.Int32 }

func count(reg *srfake.Registry, keys ...string) counter {
	c := counter{n: make(map[string]*atomic.Int32)}
	for _, k := range keys {
		c.n[k] = new(atomic.Int32)
	}
	reg.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if n, ok := c.n[r.Method+" "+r.URL.Path]; ok {
			n.Add(1)
		}
		return false
	})
	return c
}

func (c counter) get(key string) int { return int(c.n[key].Load()) }

func newClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	if cfg.RetryMin == 0 {
		cfg.RetryMin, cfg.RetryMax = time.Millisecond, 10*time.Millisecond
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func TestRegisterAndSchemaAreCached(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	n := count(reg, "POST /subjects/t-value/versions", "POST /subjects/u-value/versions", "GET /schemas/ids/1")
	c := newClient(t, Config{URL: reg.URL()})
	ctx := t.Context()

	id, err := c.Register(ctx, "t-value", sr.TypeAvro, schemaV1)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	again, err := c.Register(ctx, "t-value", sr.TypeAvro, schemaV1)
	if err != nil || again != id {
		t.Fatalf("second Register = %d, %v; want %d from the cache", again, err, id)
	}
	if got := n.get("POST /subjects/t-value/versions"); got != 1 {
		t.Errorf("registry saw %d registrations of t-value, want 1", got)
	}
	// The same text under another subject is another registration (the registry may give the
	// same id).
	if _, err := c.Register(ctx, "u-value", sr.TypeAvro, schemaV1); err != nil {
		t.Fatalf("Register u-value: %v", err)
	}
	if got := n.get("POST /subjects/u-value/versions"); got != 1 {
		t.Errorf("registry saw %d registrations of u-value, want 1", got)
	}
	v2, err := c.Register(ctx, "t-value", sr.TypeAvro, schemaV2)
	if err != nil || v2 == id {
		t.Fatalf("Register v2 = %d, %v; want a new id", v2, err)
	}

	for range 2 {
		s, err := c.Schema(ctx, id)
		if err != nil {
			t.Fatalf("Schema(%d): %v", id, err)
		}
		if s.Schema != schemaV1 {
			t.Errorf("Schema(%d) = %s, want %s", id, s.Schema, schemaV1)
		}
	}
	if got := n.get("GET /schemas/ids/1"); id == 1 && got != 1 {
		t.Errorf("registry saw %d lookups of id 1, want 1", got)
	}
	if _, err := c.Schema(ctx, 999); !errors.Is(err, ErrNotFound) {
		t.Errorf("Schema(999) = %v, want ErrNotFound", err)
	}
}

func TestIncompatibleIsTypedAndNotRetried(t *testing.T) {
	reg := srfake.New(srfake.WithGlobalCompat(sr.CompatBackward))
	defer reg.Close()
	var posts atomic.Int32
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method != http.MethodPost {
			return false
		}
		posts.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"error_code":409,"message":"Incompatible artifact: t-value [AVRO], num of incompatible diffs: {1}"}`))
		return true
	})
	c := newClient(t, Config{URL: reg.URL()})
	_, err := c.Register(t.Context(), "t-value", sr.TypeAvro, schemaV2)
	ie, ok := errors.AsType[*IncompatibleError](err)
	if !ok {
		t.Fatalf("Register = %v, want an *IncompatibleError", err)
	}
	if ie.Subject != "t-value" || ie.Level != sr.CompatBackward || !strings.Contains(ie.Reason, "incompatible diffs") {
		t.Errorf("IncompatibleError = %+v, want subject t-value, level BACKWARD and the registry's reason", ie)
	}
	for _, want := range []string{`"t-value"`, "BACKWARD", "fix:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %s", err, want)
		}
	}
	if got := posts.Load(); got != 1 {
		t.Errorf("registry saw %d registrations, want 1 (a refusal is not retried)", got)
	}
	if st := c.Status(); !st.Reachable() {
		t.Errorf("Status after a refusal = %+v, want reachable: the registry answered", st)
	}
}

func TestTransientFailuresAreRetried(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusTooManyRequests} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			reg := srfake.New()
			defer reg.Close()
			var posts atomic.Int32
			reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
				if r.Method != http.MethodPost || posts.Add(1) > 3 {
					return false
				}
				w.WriteHeader(status)
				return true
			})
			c := newClient(t, Config{URL: reg.URL()})
			id, err := c.Register(t.Context(), "t-value", sr.TypeAvro, schemaV1)
			if err != nil || id <= 0 {
				t.Fatalf("Register = %d, %v; want an id after the failures", id, err)
			}
			if got := posts.Load(); got != 4 {
				t.Errorf("registry saw %d registrations, want 4 (3 failures, then success)", got)
			}
			if st := c.Status(); !st.Reachable() {
				t.Errorf("Status after success = %+v, want reachable", st)
			}
		})
	}
}

func TestUnreachableIsBoundedByContext(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close() // nothing listens there now
	c := newClient(t, Config{URL: url})
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Register(ctx, "t-value", sr.TypeAvro, schemaV1)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Register = %v, want the context's deadline", err)
	}
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("error %q does not carry the last attempt's failure", err)
	}
	st := c.Status()
	if st.Reachable() || st.Attempts < 2 || st.Since.IsZero() {
		t.Errorf("Status = %+v, want unreachable after several attempts", st)
	}
}

func TestUnauthorizedNamesTheFixNotThePassword(t *testing.T) {
	const password = "hunter2-registry"
	reg := srfake.New(srfake.WithAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("alice:right"))))
	defer reg.Close()
	var requests atomic.Int32
	reg.Intercept(func(http.ResponseWriter, *http.Request) bool { requests.Add(1); return false })

	c := newClient(t, Config{URL: reg.URL(), Username: "alice", Password: password})
	_, err := c.Register(t.Context(), "t-value", sr.TypeAvro, schemaV1)
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("Register = %v, want ErrUnauthorized", err)
	}
	if strings.Contains(err.Error(), password) {
		t.Errorf("error %q quotes the password", err)
	}
	if !strings.Contains(err.Error(), "CDC_SCHEMA_REGISTRY_PASSWORD") {
		t.Errorf("error %q does not name the variables to check", err)
	}
	if got := requests.Load(); got != 1 {
		t.Errorf("registry saw %d requests, want 1 (a refusal is not retried)", got)
	}

	ok := newClient(t, Config{URL: reg.URL(), Username: "alice", Password: "right"})
	if _, err := ok.Register(t.Context(), "t-value", sr.TypeAvro, schemaV1); err != nil {
		t.Errorf("Register with the right password: %v", err)
	}
}

func TestTLSVerifiesAgainstCAFile(t *testing.T) {
	reg := srfake.NewRegistry()
	srv := httptest.NewTLSServer(reg.Handler())
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	der := srv.Certificate().Raw
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}

	c := newClient(t, Config{URL: srv.URL, CAFile: caFile})
	if _, err := c.Register(t.Context(), "t-value", sr.TypeAvro, schemaV1); err != nil {
		t.Fatalf("Register over TLS with the CA file: %v", err)
	}

	// Without the CA, the system roots refuse the test server's certificate at once.
	untrusted := newClient(t, Config{URL: srv.URL})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := untrusted.Register(ctx, "t-value", sr.TypeAvro, schemaV1)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Register without the CA = %v, want a verification failure, not retried", err)
	}
	if !strings.Contains(err.Error(), "CDC_SCHEMA_REGISTRY_TLS_CA_FILE") {
		t.Errorf("error %q does not name CDC_SCHEMA_REGISTRY_TLS_CA_FILE", err)
	}
	var unknownCA x509.UnknownAuthorityError
	if !errors.Is(err, ErrTLS) || !errors.As(err, &unknownCA) {
		t.Errorf("error %q is not ErrTLS wrapping the x509 error", err)
	}
	if st := untrusted.Status(); st.Reachable() || st.Attempts != 1 || !errors.Is(st.Err, ErrTLS) ||
		!strings.Contains(st.Err.Error(), "CDC_SCHEMA_REGISTRY_TLS_CA_FILE") {
		t.Errorf("Status after a refused certificate = %+v, want one failure that is ErrTLS and names the fix", st)
	}
}

func TestCompatibility(t *testing.T) {
	reg := srfake.New(srfake.WithGlobalCompat(sr.CompatFull))
	defer reg.Close()
	c := newClient(t, Config{URL: reg.URL()})
	for _, subject := range []string{"", "t-value"} {
		level, err := c.Compatibility(t.Context(), subject)
		if err != nil || level != sr.CompatFull {
			t.Errorf("Compatibility(%q) = %v, %v; want FULL (the global level)", subject, level, err)
		}
	}
	if err := reg.SetCompat("t-value", sr.CompatNone); err != nil {
		t.Fatal(err)
	}
	if level, err := c.Compatibility(t.Context(), "t-value"); err != nil || level != sr.CompatNone {
		t.Errorf("Compatibility(t-value) = %v, %v; want the subject's NONE", level, err)
	}
}

// TestMutualTLS serves the fake registry behind a server that requires a client certificate
// from the test's CA.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	clientDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: "tidemark"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, caCert, &clientKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(clientKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	for file, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: clientDER}, keyFile: {Type: "PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(file, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	srv := httptest.NewUnstartedServer(srfake.NewRegistry().Handler())
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	srv.StartTLS()
	defer srv.Close()
	serverCA := filepath.Join(dir, "server-ca.pem")
	if err := os.WriteFile(serverCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}

	c := newClient(t, Config{URL: srv.URL, CAFile: serverCA, CertFile: certFile, KeyFile: keyFile})
	if _, err := c.Register(t.Context(), "t-value", sr.TypeAvro, schemaV1); err != nil {
		t.Fatalf("Register with the client certificate: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = newClient(t, Config{URL: srv.URL, CAFile: serverCA}).Register(ctx, "t-value", sr.TypeAvro, schemaV1)
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Register without a client certificate = %v, want a refusal at once", err)
	}
	if !strings.Contains(err.Error(), "CDC_SCHEMA_REGISTRY_TLS_CERT_FILE") {
		t.Errorf("error %q does not name CDC_SCHEMA_REGISTRY_TLS_CERT_FILE", err)
	}
	if _, err := New(Config{URL: srv.URL, CertFile: certFile, KeyFile: filepath.Join(dir, "missing.pem")}); err == nil ||
		!strings.Contains(err.Error(), "missing.pem") {
		t.Errorf("New with a missing key file = %v, want an error naming it", err)
	}
}
