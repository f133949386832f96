package schemareg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/tidemark/cdc/internal/testenv"
)

// The tests below run against a real Apicurio Registry (testenv.Registry, StartRegistry); the
// others use franz-go's srfake.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// subject is a subject name of the test's own on the shared registry.
func subject(t testing.TB) string {
	name := strings.NewReplacer("/", "-", " ", "-", "'", "").Replace(strings.ToLower(t.Name()))
	return fmt.Sprintf("%s-%d-value", name, time.Now().UnixNano())
}

// setLevel sets subject's compatibility level through the registry's API.
func setLevel(t testing.TB, url, subject string, level sr.CompatibilityLevel) {
	t.Helper()
	cl, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	res := cl.SetCompatibility(t.Context(), sr.SetCompatibility{Level: level}, subject)
	if res[0].Err != nil {
		t.Fatalf("set compatibility of %s to %s: %v", subject, level, res[0].Err)
	}
}

func sameJSON(t testing.TB, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatalf("schema %s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatalf("schema %s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func TestApicurioRegisterLookupCompatibility(t *testing.T) {
	url := testenv.Registry(t)
	subj := subject(t)
	setLevel(t, url, subj, sr.CompatBackward)
	ctx := t.Context()
	c := newClient(t, Config{URL: url})

	id1, err := c.Register(ctx, subj, sr.TypeAvro, schemaV1)
	if err != nil {
		t.Fatalf("Register v1: %v", err)
	}
	got, err := c.Schema(ctx, id1)
	if err != nil {
		t.Fatalf("Schema(%d): %v", id1, err)
	}
	if !sameJSON(t, got.Schema, schemaV1) || got.Type != sr.TypeAvro {
		t.Errorf("Schema(%d) = %s (%s), want %s (AVRO)", id1, got.Schema, got.Type, schemaV1)
	}

	// A new column with a default: BACKWARD accepts it as a new version with a new id.
	id2, err := c.Register(ctx, subj, sr.TypeAvro, schemaV2)
	if err != nil {
		t.Fatalf("Register v2 (compatible): %v", err)
	}
	if id2 == id1 {
		t.Errorf("v2 got v1's id %d", id1)
	}

	// A new column without a default: readers of the new schema cannot read old records.
	incompatible := `{"type":"record","name":"row","fields":[{"name":"id","type":"int"},{"name":"note","type":["null","string"],"default":null},{"name":"qty","type":"long"}]}`
	_, err = c.Register(ctx, subj, sr.TypeAvro, incompatible)
	ie, ok := errors.AsType[*IncompatibleError](err)
	if !ok {
		t.Fatalf("Register of an incompatible schema = %v, want an *IncompatibleError", err)
	}
	if ie.Subject != subj || ie.Level != sr.CompatBackward {
		t.Errorf("IncompatibleError names subject %q, level %v; want %q, BACKWARD", ie.Subject, ie.Level, subj)
	}
	t.Logf("refusal: %v", err)

	// Another client (a restarted cdc) registering v1 again gets the registry's id for it.
	other := newClient(t, Config{URL: url})
	again, err := other.Register(ctx, subj, sr.TypeAvro, schemaV1)
	if err != nil || again != id1 {
		t.Errorf("v1 registered again = %d, %v; want id %d", again, err, id1)
	}
	if level, err := c.Compatibility(ctx, subj); err != nil || level != sr.CompatBackward {
		t.Errorf("Compatibility(%s) = %v, %v; want BACKWARD", subj, level, err)
	}
}

// TestApicurioRestart stops a registry of the test's own while a registration waits on it: the
// client retries until the registry is back, then gets an id.
func TestApicurioRestart(t *testing.T) {
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{})
	logRSS(t, reg, "after start")
	c := newClient(t, Config{URL: reg.URL(), RetryMin: 100 * time.Millisecond, RetryMax: time.Second,
		RequestTimeout: 5 * time.Second})
	subj := subject(t)
	if _, err := c.Register(t.Context(), subj, sr.TypeAvro, schemaV1); err != nil {
		t.Fatalf("Register before the stop: %v", err)
	}
	logRSS(t, reg, "after a registration")

	reg.Stop()
	short, cancel := context.WithTimeout(t.Context(), time.Second)
	_, err := c.Register(short, subj, sr.TypeAvro, schemaV2)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Register while stopped, 1s deadline = %v; want the deadline", err)
	}

	type result struct {
		id  ID
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	go func() {
		id, err := c.Register(ctx, subj, sr.TypeAvro, schemaV2)
		done <- result{id, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for c.Status().Attempts < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("Status = %+v 30s after the stop; want failed attempts", c.Status())
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := c.Status()
	if st.Reachable() {
		t.Fatalf("Status = %+v while stopped, want unreachable", st)
	}
	t.Logf("while stopped: %d failed attempts since %s: %v", st.Attempts, st.Since.Format(time.TimeOnly), st.Err)

	restarted := time.Now()
	reg.Start()
	r := <-done
	if r.err != nil || r.id <= 0 {
		t.Fatalf("Register across the restart = %d, %v; want an id", r.id, r.err)
	}
	t.Logf("registered %d s after the restart began", int(time.Since(restarted).Seconds()))
	if st := c.Status(); !st.Reachable() {
		t.Errorf("Status after the restart = %+v, want reachable", st)
	}
	// The restarted registry holds only what was registered since (in-memory storage).
	if s, err := c.Schema(t.Context(), r.id); err != nil || !sameJSON(t, s.Schema, schemaV2) {
		t.Errorf("Schema(%d) after the restart = %v, %v; want v2", r.id, s.Schema, err)
	}
}

// logRSS logs the registry JVM's resident memory.
func logRSS(t testing.TB, reg *testenv.RegistryServer, when string) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", reg.PID()))
	if err != nil {
		t.Logf("registry RSS %s: %v", when, err)
		return
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			t.Logf("registry RSS %s: %s", when, strings.TrimSpace(strings.TrimPrefix(line, "VmRSS:")))
		}
	}
}

// TestApicurioTLS runs a registry that serves HTTPS only, with a certificate for "localhost"
// from a CA of the test's own, and checks the verification rules: the CA file and the server
// name make it work; without either the client refuses at once, naming the variable to set; and
// https:// to the shared registry's plain port is named as such.
func TestApicurioTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testenv.NewTestCA(dir, "registry-ca")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.Issue(dir, "registry", []string{"localhost"}, false)
	if err != nil {
		t.Fatal(err)
	}
	reg := testenv.StartRegistry(t, testenv.RegistryOptions{TLSCert: cert, TLSKey: key})
	if !strings.HasPrefix(reg.URL(), "https://127.0.0.1:") {
		t.Fatalf("URL = %s, want https://127.0.0.1:...", reg.URL())
	}

	c := newClient(t, Config{URL: reg.URL(), CAFile: ca.File, ServerName: "localhost"})
	id, err := c.Register(t.Context(), subject(t), sr.TypeAvro, schemaV1)
	if err != nil {
		t.Fatalf("Register over TLS: %v", err)
	}
	if _, err := c.Schema(t.Context(), id); err != nil {
		t.Fatalf("Schema(%d) over TLS: %v", id, err)
	}

	plain := testenv.Registry(t)
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no CA file", Config{URL: reg.URL(), ServerName: "localhost"}, "CDC_SCHEMA_REGISTRY_TLS_CA_FILE"},
		{"certificate not for the URL's host", Config{URL: reg.URL(), CAFile: ca.File}, "CDC_SCHEMA_REGISTRY_TLS_SERVER_NAME"},
		{"https to a plain port", Config{URL: strings.Replace(plain, "http://", "https://", 1)}, "does not speak TLS"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			_, err := newClient(t, tt.cfg).Register(ctx, subject(t), sr.TypeAvro, schemaV1)
			if err == nil || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Register = %v, want a refusal at once", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}
