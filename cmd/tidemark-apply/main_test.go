package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tidemark/cdc/integration/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func TestHelpListsEveryVariable(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"help"}, func(string) string { return "" }, nil, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, v := range envVars() {
		if !strings.Contains(out.String(), v.Name) {
			t.Errorf("help lacks %s", v.Name)
		}
	}
	for _, v := range securityVars {
		if !strings.Contains(out.String(), v) {
			t.Errorf("help lacks %s", v)
		}
	}
}

func TestConfigEveryProblemNoSecret(t *testing.T) {
	vars := map[string]string{
		"APPLY_TARGET_URL":         "postgres://app:hunter2secret@db/x?sslmode=nonsense",
		"APPLY_TABLES":             "public.a,nodot",
		"APPLY_CREATE_TABLES":      "maybe",
		"APPLY_PROGRESS_TABLE":     "progress",
		"APPLY_LOG_LEVEL":          "loud",
		"APPLY_HTTP_ADDR":          "nocolon",
		"CDC_KAFKA_BROKERS":        "k1",
		"CDC_KAFKA_SASL_MECHANISM": "PLAIN",
		"CDC_KAFKA_SASL_PASSWORD":  "saslsecret",
	}
	_, err := loadConfig(func(k string) string { return vars[k] }, []string{"APPLY_TABLE=public.a", "PATH=/bin"})
	ce, ok := errors.AsType[*configError](err)
	if !ok {
		t.Fatalf("loadConfig: %v, want a *configError", err)
	}
	text := err.Error()
	for _, name := range []string{"APPLY_TARGET_URL", "APPLY_TABLES", "APPLY_CREATE_TABLES", "APPLY_PROGRESS_TABLE",
		"APPLY_LOG_LEVEL", "APPLY_HTTP_ADDR", "CDC_KAFKA_BROKERS", "CDC_KAFKA_SASL_USERNAME", "APPLY_TABLE:"} {
		if !strings.Contains(text, name) {
			t.Errorf("problems lack %s:\n%s", name, text)
		}
	}
	if len(ce.problems) < 9 {
		t.Errorf("%d problems, want at least 9:\n%s", len(ce.problems), text)
	}
	for _, secret := range []string{"hunter2secret", "saslsecret"} {
		if strings.Contains(text, secret) {
			t.Errorf("problems print a secret:\n%s", text)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	vars := map[string]string{"APPLY_TARGET_URL": "postgres://x@db/y", "CDC_KAFKA_BROKERS": "k:9092", "CDC_TOPIC_PREFIX": "demo"}
	c, err := loadConfig(func(k string) string { return vars[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.watermarkTopic != "demo.__watermarks" || c.progress.Sanitize() != `"public"."tidemark_apply_progress"` || c.name != "tidemark-apply" || c.createTables {
		t.Errorf("defaults: %+v", c)
	}
}
