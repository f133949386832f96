package integration

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/tidemark/cdc/internal/testenv"
	tmavro "github.com/tidemark/cdc/pkg/format/avro"
	"github.com/tidemark/cdc/pkg/schemareg"
)

// securedRegistry is a private Apicurio Registry that serves HTTPS only, with a certificate for
// "localhost" from a CA of the test's own, and requires HTTP basic auth on its API.
type securedRegistry struct {
	url, ca, otherCA string // otherCA did not sign the registry's certificate
	user, password   string
}

// wrongPassword is a password the registry refuses; like secret, it must never reach a log.
const wrongPassword = "Wr0ng-Pa55-93ae"

// TestAvroRegistrySecured runs cdc with CDC_VALUE_FORMAT=avro against a real Apicurio Registry
// that serves HTTPS only and requires basic auth (a Quarkus embedded user; no OIDC server).
// First the mistakes, each through `cdc check` and a running cdc: a CA that did not sign the
// registry's certificate (check's registry line and /readyz name the certificate), and a wrong
// password (check and the log name HTTP 401; neither password appears in any output). Then
// the right settings: check passes, and the topic, written by the same slot after the failed
// runs and rows added between them, decodes with ids the registry holds and equals the table.
// (Mutual TLS is not tested here: Apicurio 3.3.3 cannot require a client certificate, its build
// fixed quarkus.http.ssl.client-auth to NONE; pkg/schemareg's unit test covers cdc's side.)
func TestAvroRegistrySecured(t *testing.T) {
	t.Parallel() // mostly waiting on the JVM's start and on cdc's restarts
	reg := startSecuredRegistry(t)
	e := newEnv(t)
	e.exec(`CREATE TABLE secured (id int PRIMARY KEY, v text)`,
		`INSERT INTO secured SELECT g, 'row ' || g FROM generate_series(1, 100) g`,
		"CREATE PUBLICATION "+e.pub+" FOR TABLE secured")
	vars := e.baseVars()
	vars["CDC_VALUE_FORMAT"] = "avro"
	vars["CDC_SCHEMA_REGISTRY_URL"] = reg.url
	vars["CDC_SCHEMA_REGISTRY_TLS_CA_FILE"] = reg.ca
	vars["CDC_SCHEMA_REGISTRY_TLS_SERVER_NAME"] = "localhost"
	vars["CDC_SCHEMA_REGISTRY_USERNAME"] = reg.user
	vars["CDC_SCHEMA_REGISTRY_PASSWORD"] = reg.password

	t.Run("a CA that did not sign the registry's certificate", func(t *testing.T) {
		bad := withVar(vars, "CDC_SCHEMA_REGISTRY_TLS_CA_FILE", reg.otherCA)
		res := runCDC(t, bad, time.Minute, "check")
		if res.code == 0 {
			t.Errorf("cdc check exit 0 with the wrong CA")
		}
		line, fix := failedCheck(t, res.out, "✗ schema registry "+reg.url+": ")
		assertContains(t, line, "the schema registry's TLS certificate is signed by an authority not in CDC_SCHEMA_REGISTRY_TLS_CA_FILE",
			"x509: certificate signed by unknown authority")
		// The fix is the CA file, not the URL or the registry's health.
		assertContains(t, fix, "CDC_SCHEMA_REGISTRY_TLS_CA_FILE")
		if strings.Contains(res.out, "✓ schema registry: encrypted, certificate verified") {
			t.Errorf("cdc check says the certificate verified beside its failure:\n%s", res.out)
		}
		assertNoPassword(t, res.out)
		bad["CDC_HTTP_ADDR"] = freeAddr(t)
		p := e.startCDC(bad)
		body := waitEndpoint(t, bad["CDC_HTTP_ADDR"], "/readyz", http.StatusServiceUnavailable, "x509: certificate signed by unknown authority", p)
		// Said at once (retrying does not mend a CA), with the setting to fix.
		assertContains(t, body, "the schema registry refuses cdc's TLS or credentials", "set CDC_SCHEMA_REGISTRY_TLS_CA_FILE")
		t.Logf("/readyz: %s", body)
		// This life created the slot and began the table's chunked copy before the registry
		// refused: the restart with the right CA must take the copy up again, not call the
		// slot's position lost.
		waitLog(t, p, "chunk failed; reading it again", time.Minute)
		p.stop(syscall.SIGTERM)
		assertContains(t, p.log.String(), "created replication slot", "chunked copy started",
			"signed by an authority not in CDC_SCHEMA_REGISTRY_TLS_CA_FILE")
		logFirst(t, p, "signed by an authority")
		assertNoPassword(t, p.log.String())
	})
	e.exec(`INSERT INTO secured SELECT g, 'between ' || g FROM generate_series(101, 150) g`)

	t.Run("a wrong password", func(t *testing.T) {
		bad := withVar(vars, "CDC_SCHEMA_REGISTRY_PASSWORD", wrongPassword)
		res := runCDC(t, bad, time.Minute, "check")
		if res.code == 0 {
			t.Errorf("cdc check exit 0 with a wrong password")
		}
		line, fix := failedCheck(t, res.out, "✗ schema registry "+reg.url+" answers, but refused the credentials of user \""+reg.user+"\"")
		assertContains(t, line, "(HTTP 401)")
		assertContains(t, fix, "CDC_SCHEMA_REGISTRY_PASSWORD")
		assertNoPassword(t, res.out)
		bad["CDC_HTTP_ADDR"] = freeAddr(t)
		p := e.startCDC(bad)
		waitLog(t, p, "the schema registry refused the credentials (HTTP 401): check CDC_SCHEMA_REGISTRY_USERNAME and CDC_SCHEMA_REGISTRY_PASSWORD", time.Minute)
		// Not ready, at once, naming the credentials (and never the password).
		body := waitEndpoint(t, bad["CDC_HTTP_ADDR"], "/readyz", http.StatusServiceUnavailable, "the schema registry refuses cdc's TLS or credentials", p)
		assertContains(t, body, "HTTP 401", "CDC_SCHEMA_REGISTRY_PASSWORD")
		assertNoPassword(t, body)
		t.Logf("/readyz: %s", body)
		p.stop(syscall.SIGTERM)
		logFirst(t, p, "HTTP 401")
		assertNoPassword(t, p.log.String())
	})
	e.exec(`UPDATE secured SET v = v || ' updated' WHERE id % 10 = 0`)

	t.Run("https and basic auth", func(t *testing.T) {
		res := runCDC(t, vars, time.Minute, "check")
		if res.code != 0 {
			t.Errorf("cdc check exit %d with the right settings", res.code)
		}
		assertContains(t, res.out, "✓ schema registry: encrypted, certificate verified against CDC_SCHEMA_REGISTRY_TLS_CA_FILE",
			"✓ schema registry "+reg.url+" reachable as "+reg.user)
		assertNoPassword(t, res.out)
		p := e.startCDC(vars)
		e.waitFor(p, 2*time.Minute, e.currentLSN(t.Context()), "public.secured")
		checkSecuredTopic(t, e, reg)
		assertNoPassword(t, p.log.String())
	})
}

// startSecuredRegistry makes the CAs and the registry's certificate and starts the registry.
func startSecuredRegistry(t *testing.T) securedRegistry {
	t.Helper()
	dir := t.TempDir()
	ca, err := testenv.NewTestCA(dir, "registry-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testenv.NewTestCA(dir, "other-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(dir, "registry", []string{"localhost"}, false)
	if err != nil {
		t.Fatal(err)
	}
	s := securedRegistry{ca: ca.File, otherCA: other.File, user: "tidemark", password: secret}
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{TLSCert: cert, TLSKey: key, User: s.user, Password: s.password})
	s.url = reg.URL()
	if !strings.HasPrefix(s.url, "https://") {
		t.Fatalf("registry URL %s, want https://", s.url)
	}
	return s
}

// withVar returns a copy of vars with name set to value.
func withVar(vars map[string]string, name, value string) map[string]string {
	out := make(map[string]string, len(vars)+1)
	for k, v := range vars {
		out[k] = v
	}
	out[name] = value
	return out
}

// failedCheck returns the line of cdc check's output that begins with prefix, and the text of
// the fix line after it; it fails the test when there is none.
func failedCheck(t testing.TB, out, prefix string) (line, fix string) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(strings.TrimSpace(l), prefix) {
			continue
		}
		if i+1 < len(lines) {
			fix, _ = strings.CutPrefix(strings.TrimSpace(lines[i+1]), "fix: ")
		}
		return l, fix
	}
	t.Fatalf("cdc check says no %q", prefix)
	return "", ""
}

// logFirst logs the first line of p's log that holds s.
func logFirst(t testing.TB, p *proc, s string) {
	t.Helper()
	if lines := logLines(p.log.String(), s); len(lines) > 0 {
		t.Logf("cdc's log: %s", lines[0])
	}
}

// assertNoPassword fails when out holds either password.
func assertNoPassword(t testing.TB, out string) {
	t.Helper()
	for _, pw := range []string{secret, wrongPassword} {
		if strings.Contains(out, pw) {
			t.Errorf("a password appears in the output")
		}
	}
}

// checkSecuredTopic: every record of the table's topic carries ids the registry holds (read over
// TLS with the credentials) and decodes, and the topic ends with the table's rows.
func checkSecuredTopic(t *testing.T, e *env, reg securedRegistry) {
	t.Helper()
	pem, err := os.ReadFile(reg.ca)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost", MinVersion: tls.VersionTLS12}}
	rc, err := sr.NewClient(sr.URLs(reg.url), sr.HTTPClient(&http.Client{Transport: tr, Timeout: 30 * time.Second}),
		sr.BasicAuth(reg.user, reg.password))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := schemareg.New(schemareg.Config{URL: reg.url, CAFile: reg.ca, ServerName: "localhost",
		Username: reg.user, Password: reg.password})
	if err != nil {
		t.Fatal(err)
	}
	topic := e.topic("public.secured")
	got := avroTopicRows(t, tmavro.NewDecoder(cl), registeredIDs(t, rc, topic, 1), e.readTopic(topic))
	want := tableRows(t, e, "secured")
	if len(got) != len(want) {
		t.Errorf("the topic holds %d rows, the table %d", len(got), len(want))
	}
	for id, row := range want {
		if got[id] != row {
			t.Errorf("id %s: the topic has %q, the table %q", id, got[id], row)
		}
	}
	t.Logf("%d rows, decoded with the registry's ids, equal the table", len(got))
}
