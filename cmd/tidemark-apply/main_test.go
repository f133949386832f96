package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testenv"
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
	for _, v := range append(securityVars, registryVars...) {
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
	vars := map[string]string{"APPLY_TARGET_URL": "postgres://x@db/y", "APPLY_TABLES": "public.a", "CDC_KAFKA_BROKERS": "k:9092", "CDC_TOPIC_PREFIX": "demo"}
	c, err := loadConfig(func(k string) string { return vars[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.watermarkTopic != "demo.__watermarks" || c.progress.Sanitize() != `"public"."tidemark_apply_progress"` || c.name != "tidemark-apply" || c.createTables {
		t.Errorf("defaults: %+v", c)
	}
	if c.allTables || c.schemas != nil || c.skip != nil || c.connectTimeout != 10*time.Second || c.receiveTimeout != time.Minute || c.stallAfter != 5*time.Minute {
		t.Errorf("defaults: %+v", c)
	}
}

// validVars is a valid configuration; with(validVars(), ...) changes it.
func validVars() map[string]string {
	return map[string]string{"APPLY_TARGET_URL": "postgres://app:hunter2secret@db.example/y", "APPLY_TABLES": "public.a,shop.b", "CDC_KAFKA_BROKERS": "k:9092"}
}

func with(m map[string]string, set map[string]string) map[string]string {
	for k, v := range set {
		if v == "" {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	return m
}

// problemVars loads vars and returns the variables its problems name, in order ("" when
// valid), and the error's text.
func problemVars(t *testing.T, vars map[string]string) ([]string, string) {
	t.Helper()
	_, err := loadConfig(func(k string) string { return vars[k] }, nil)
	if err == nil {
		return nil, ""
	}
	ce, ok := errors.AsType[*configError](err)
	if !ok {
		t.Fatalf("loadConfig: %v, want a *configError", err)
	}
	var names []string
	for _, p := range ce.problems {
		name, _, _ := strings.Cut(p.Error(), ":")
		name, _, _ = strings.Cut(name, "=")
		names = append(names, name)
	}
	if strings.Contains(err.Error(), "hunter2secret") {
		t.Errorf("problems print the password:\n%v", err)
	}
	return names, err.Error()
}

func TestConfigTableSelection(t *testing.T) {
	tests := []struct {
		name string
		set  map[string]string
		want []string // the variables named by problems; nil: valid
		says string   // in the problems' text
	}{
		{"tables", nil, nil, ""},
		{"neither tables nor all", map[string]string{"APPLY_TABLES": ""}, []string{"APPLY_TABLES"}, "APPLY_ALL_TABLES=true"},
		{"only commas", map[string]string{"APPLY_TABLES": " , "}, []string{"APPLY_TABLES"}, "required"},
		{"all tables", map[string]string{"APPLY_TABLES": "", "APPLY_ALL_TABLES": "true"}, nil, ""},
		{"all tables in two schemas", map[string]string{"APPLY_TABLES": "", "APPLY_ALL_TABLES": "true", "APPLY_SCHEMAS": "shop, crm,shop"}, nil, ""},
		{"both", map[string]string{"APPLY_ALL_TABLES": "true"}, []string{"APPLY_TABLES"}, "not both"},
		{"all tables false is no choice", map[string]string{"APPLY_TABLES": "", "APPLY_ALL_TABLES": "false"}, []string{"APPLY_TABLES"}, "required"},
		{"all tables not a boolean", map[string]string{"APPLY_TABLES": "", "APPLY_ALL_TABLES": "everything"}, []string{"APPLY_ALL_TABLES", "APPLY_TABLES"}, "want true or false"},
		{"schemas without all", map[string]string{"APPLY_SCHEMAS": "shop"}, []string{"APPLY_SCHEMAS"}, "narrows APPLY_ALL_TABLES=true only"},
		{"schema with a table", map[string]string{"APPLY_TABLES": "", "APPLY_ALL_TABLES": "true", "APPLY_SCHEMAS": "shop.b"}, []string{"APPLY_SCHEMAS"}, "without a table"},
		{"pg_catalog table", map[string]string{"APPLY_TABLES": "public.a,pg_catalog.pg_class"}, []string{"APPLY_TABLES"}, "pg_catalog is a system schema"},
		{"information_schema table", map[string]string{"APPLY_TABLES": "information_schema.tables"}, []string{"APPLY_TABLES"}, "system schema"},
		{"pg_toast table", map[string]string{"APPLY_TABLES": "pg_toast.pg_toast_1"}, []string{"APPLY_TABLES"}, "system schema"},
		{"pg_ prefix table", map[string]string{"APPLY_TABLES": "pg_temp_3.t"}, []string{"APPLY_TABLES"}, "system schema"},
		{"system schemas", map[string]string{"APPLY_TABLES": "", "APPLY_ALL_TABLES": "true", "APPLY_SCHEMAS": "public,pg_catalog,information_schema"}, []string{"APPLY_SCHEMAS", "APPLY_SCHEMAS"}, "system schema"},
		{"system target schema", map[string]string{"APPLY_TARGET_SCHEMA": "pg_catalog"}, []string{"APPLY_TARGET_SCHEMA"}, "system schema"},
		{"information_schema target", map[string]string{"APPLY_TARGET_SCHEMA": "information_schema"}, []string{"APPLY_TARGET_SCHEMA"}, "system schema"},
		{"a user's PG_ schema", map[string]string{"APPLY_TABLES": "PG_Data.t"}, nil, ""},
		{"progress table applied", map[string]string{"APPLY_TABLES": "public.a,public.tidemark_apply_progress"}, []string{"APPLY_TABLES"}, "the progress table"},
		{"progress table through the target schema", map[string]string{"APPLY_TABLES": "shop.progress", "APPLY_TARGET_SCHEMA": "replica", "APPLY_PROGRESS_TABLE": "replica.progress"},
			[]string{"APPLY_TABLES"}, `"replica"."progress", the progress table`},
		{"same name, other schema", map[string]string{"APPLY_TABLES": "shop.tidemark_apply_progress"}, nil, ""},
		{"progress table in a system schema", map[string]string{"APPLY_PROGRESS_TABLE": "pg_catalog.progress"}, []string{"APPLY_PROGRESS_TABLE"}, "system schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, text := problemVars(t, with(validVars(), tt.set))
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("problems with %v, want %v:\n%s", got, tt.want, text)
			}
			if !strings.Contains(text, tt.says) {
				t.Errorf("problems do not say %q:\n%s", tt.says, text)
			}
		})
	}
	c, err := loadConfig(func(k string) string {
		return with(validVars(), map[string]string{"APPLY_TABLES": "", "APPLY_ALL_TABLES": "yes", "APPLY_SCHEMAS": "shop, crm,shop"})[k]
	}, nil)
	if err != nil || !c.allTables || len(c.tables) != 0 || strings.Join(c.schemas, ",") != "shop,crm" {
		t.Errorf("APPLY_ALL_TABLES with APPLY_SCHEMAS: %+v, %v", c, err)
	}
}

func TestSystemSchema(t *testing.T) {
	for s, want := range map[string]bool{"pg_catalog": true, "information_schema": true, "pg_toast": true, "pg_temp_12": true,
		"pg_toast_temp_1": true, "pg_": true, "public": false, "PG_Data": false, "shop_pg_x": false, "pgdata": false, "Information_Schema": false} {
		if got := systemSchema(s); got != want {
			t.Errorf("systemSchema(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestConfigSkipRecords(t *testing.T) {
	set := func(v string) func(string) string {
		return func(k string) string { return with(validVars(), map[string]string{"APPLY_SKIP_RECORDS": v})[k] }
	}
	c, err := loadConfig(set("tidemark.public.a:0:17, tidemark.public.a:2:5,tidemark.public.b:0:0"), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[recordRef]bool{{"tidemark.public.a", 0, 17}: true, {"tidemark.public.a", 2, 5}: true, {"tidemark.public.b", 0, 0}: true}
	if len(c.skip) != len(want) {
		t.Errorf("skip %v, want %v", c.skip, want)
	}
	for r := range want {
		if !c.skip[r] {
			t.Errorf("skip lacks %s: %v", r, c.skip)
		}
	}
	got, text := problemVars(t, with(validVars(), map[string]string{"APPLY_SKIP_RECORDS": "t:0:1,nocolon,t:x:1,t:0:-1"}))
	if strings.Join(got, ",") != "APPLY_SKIP_RECORDS,APPLY_SKIP_RECORDS,APPLY_SKIP_RECORDS" || !strings.Contains(text, `"nocolon"`) {
		t.Errorf("problems with %v, want three of APPLY_SKIP_RECORDS:\n%s", got, text)
	}
}

func TestConfigTimeouts(t *testing.T) {
	c, err := loadConfig(func(k string) string {
		return with(validVars(), map[string]string{"APPLY_CONNECT_TIMEOUT": "3s", "APPLY_RECEIVE_TIMEOUT": "2m", "APPLY_STALL_AFTER": "10s"})[k]
	}, nil)
	if err != nil || c.connectTimeout != 3*time.Second || c.receiveTimeout != 2*time.Minute || c.stallAfter != 10*time.Second {
		t.Errorf("timeouts: %v %v %v, %v", c.connectTimeout, c.receiveTimeout, c.stallAfter, err)
	}
	got, text := problemVars(t, with(validVars(), map[string]string{"APPLY_CONNECT_TIMEOUT": "500ms", "APPLY_RECEIVE_TIMEOUT": "2h", "APPLY_STALL_AFTER": "soon"}))
	if strings.Join(got, ",") != "APPLY_CONNECT_TIMEOUT,APPLY_RECEIVE_TIMEOUT,APPLY_STALL_AFTER" || !strings.Contains(text, "want a duration from 1s to 10m0s") {
		t.Errorf("problems with %v:\n%s", got, text)
	}
}

func TestConfigRequireTLS(t *testing.T) {
	verified := "postgres://app:hunter2secret@db.example/y?sslmode=verify-full&sslrootcert=system"
	tests := []struct {
		name string
		set  map[string]string
		want []string
	}{
		{"verified", map[string]string{"APPLY_TARGET_URL": verified, "CDC_KAFKA_TLS": "true"}, nil},
		{"target prefer", map[string]string{"CDC_KAFKA_TLS": "true"}, []string{"APPLY_TARGET_URL"}},
		{"target require", map[string]string{"APPLY_TARGET_URL": "postgres://db.example/y?sslmode=require", "CDC_KAFKA_TLS": "true"}, []string{"APPLY_TARGET_URL"}},
		{"target on loopback in plaintext", map[string]string{"APPLY_TARGET_URL": "postgres://127.0.0.1/y?sslmode=disable", "CDC_KAFKA_TLS": "true"}, nil},
		{"target socket", map[string]string{"APPLY_TARGET_URL": "host=/var/run/postgresql dbname=y", "CDC_KAFKA_TLS": "true"}, nil},
		{"kafka plaintext", map[string]string{"APPLY_TARGET_URL": verified}, []string{"CDC_KAFKA_TLS"}},
		{"kafka SASL over plaintext", map[string]string{"APPLY_TARGET_URL": verified, "CDC_KAFKA_SASL_MECHANISM": "PLAIN", "CDC_KAFKA_SASL_USERNAME": "u",
			"CDC_KAFKA_SASL_PASSWORD": "saslsecret"}, []string{"CDC_KAFKA_SASL_MECHANISM"}},
		{"both", nil, []string{"APPLY_TARGET_URL", "CDC_KAFKA_TLS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := with(validVars(), tt.set)
			vars["APPLY_REQUIRE_TLS"] = "true"
			got, text := problemVars(t, vars)
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("problems with %v, want %v:\n%s", got, tt.want, text)
			}
			if tt.want != nil && !strings.Contains(text, "APPLY_REQUIRE_TLS=true, but") {
				t.Errorf("problems do not say why:\n%s", text)
			}
			if strings.Contains(text, "saslsecret") {
				t.Errorf("problems print the SASL password:\n%s", text)
			}
		})
	}
	// Without APPLY_REQUIRE_TLS the postures are kept, to be logged: warnings, no problem.
	c, err := loadConfig(func(k string) string { return validVars()[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.postures) != 2 || c.postures[0].Conn != "target PostgreSQL" || c.postures[0].Mode != "prefer" || c.postures[0].Warning == "" ||
		c.postures[1].Mode != "plaintext" {
		t.Errorf("postures %+v; want the target's prefer with a warning, then Kafka in plaintext", c.postures)
	}
}

func TestLogPostures(t *testing.T) {
	vars := with(validVars(), map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "CDC_KAFKA_SASL_USERNAME": "u", "CDC_KAFKA_SASL_PASSWORD": "saslsecret"})
	var out bytes.Buffer
	// The configuration is valid; the run stops at once (its context is done) after the start
	// lines.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	vars["APPLY_LOG_FORMAT"] = "text"
	_ = run(ctx, nil, func(k string) string { return vars[k] }, nil, &out, &out)
	for _, want := range []string{
		`level=WARN msg="target PostgreSQL: encrypted only if the server offers TLS, else plaintext; server certificate not verified (sslmode=prefer, the default): anyone in the path can impersonate the server or force plaintext"`,
		"add sslmode=verify-full and sslrootcert=<CA file> to APPLY_TARGET_URL",
		`level=WARN msg="Kafka: not encrypted (CDC_KAFKA_TLS=false); SASL SCRAM-SHA-256: the SCRAM-SHA-256 exchange and all data cross the network in plaintext"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, out.String())
		}
	}
	for _, secret := range []string{"hunter2secret", "saslsecret"} {
		if strings.Contains(out.String(), secret) {
			t.Errorf("log shows a secret:\n%s", out.String())
		}
	}
}

// TestDocsListEveryVariable keeps docs/configuration.md's table of the applier in step with Env.
func TestDocsListEveryVariable(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "## tidemark-apply")
	for _, v := range envVars() {
		if !strings.Contains(section, "| `"+v.Name+"` |") {
			t.Errorf("docs/configuration.md's tidemark-apply table lacks %s", v.Name)
		}
	}
}
