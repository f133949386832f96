package testenv

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestRegistryReachable asks the shared registry's Confluent-compatible API for its subjects and
// its global compatibility level, and checks that a second call returns the same registry.
func TestRegistryReachable(t *testing.T) {
	url := Registry(t)
	if again := Registry(t); again != url {
		t.Fatalf("Registry returned %q, then %q: want one registry per test binary", url, again)
	}
	if os.Getenv(EnvRegistryURL) == "" && !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Errorf("Registry = %q: want a server on 127.0.0.1", url)
	}
	var subjects []string
	getJSON(t, url+"/subjects", &subjects)
	var config struct {
		CompatibilityLevel string `json:"compatibilityLevel"`
	}
	getJSON(t, url+"/config", &config)
	if config.CompatibilityLevel == "" {
		t.Errorf("GET %s/config: no compatibilityLevel", url)
	}
}

func getJSON(t testing.TB, url string, into any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
}
