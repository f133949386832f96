package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestLoadConfigEmptyValue: a variable set to nothing (or white space) is a problem naming it,
// not its default, and a required one is not reported twice.
func TestLoadConfigEmptyValue(t *testing.T) {
	for _, name := range []string{"CDC_PG_URL", "CDC_SLOT", "CDC_PUBLICATION", "CDC_TOPIC_PREFIX", "CDC_TABLES", "CDC_KAFKA_BROKERS",
		"CDC_KAFKA_TLS_CA_FILE", "CDC_LOG_LEVEL", "CDC_HTTP_ADDR", "CDC_REQUIRE_TLS"} {
		for _, value := range []string{"", "  "} {
			t.Run(name+"="+emptyOrBlank(value), func(t *testing.T) {
				m := validEnv()
				m[name] = value
				_, err := load(t, m)
				if err == nil {
					t.Fatal("LoadConfig succeeded, want an error")
				}
				if got := problemVars(t, err); !slices.Equal(got, []string{name}) {
					t.Errorf("problems with %v, want [%s]:\n%v", got, name, err)
				}
				if !strings.Contains(err.Error(), name+": is set but empty") {
					t.Errorf("error does not say the value is empty:\n%v", err)
				}
			})
		}
	}
}

func emptyOrBlank(s string) string {
	if s == "" {
		return "empty"
	}
	return "blank"
}

// TestLoadConfigContradictions: a setting that another one makes meaningless is an error.
func TestLoadConfigContradictions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file.pem")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		set  map[string]string
		want []string // variables reported; nil: valid
		text string
	}{
		{"TLS false with a server name", map[string]string{"CDC_KAFKA_TLS": "false", "CDC_KAFKA_TLS_SERVER_NAME": "kafka"}, []string{"CDC_KAFKA_TLS"},
			`CDC_KAFKA_TLS="false": turns TLS off, but CDC_KAFKA_TLS_SERVER_NAME configures TLS`},
		{"TLS 0 with a CA and a client certificate", map[string]string{"CDC_KAFKA_TLS": "0", "CDC_KAFKA_TLS_CA_FILE": file,
			"CDC_KAFKA_TLS_CERT_FILE": file, "CDC_KAFKA_TLS_KEY_FILE": file}, []string{"CDC_KAFKA_TLS"},
			"CDC_KAFKA_TLS_CA_FILE and CDC_KAFKA_TLS_CERT_FILE and CDC_KAFKA_TLS_KEY_FILE configure TLS"},
		{"TLS unset, implied by a server name", map[string]string{"CDC_KAFKA_TLS_SERVER_NAME": "kafka"}, nil, ""},
		{"TLS true with a CA", map[string]string{"CDC_KAFKA_TLS": "true", "CDC_KAFKA_TLS_CA_FILE": file}, nil, ""},
		{"placeholder without the placeholder policy", map[string]string{"CDC_UNCHANGED_TOAST_PLACEHOLDER": "n/a"}, []string{"CDC_UNCHANGED_TOAST_PLACEHOLDER"},
			"only CDC_UNCHANGED_TOAST=placeholder uses it"},
		{"chunk rows with the copy strategy", map[string]string{"CDC_SNAPSHOT_STRATEGY": "copy", "CDC_SNAPSHOT_CHUNK_ROWS": "5000"}, []string{"CDC_SNAPSHOT_CHUNK_ROWS"},
			"CDC_SNAPSHOT_STRATEGY=copy does not copy in chunks"},
		{"transaction timeout with at-least-once", map[string]string{"CDC_DELIVERY": "at-least-once", "CDC_KAFKA_TRANSACTION_TIMEOUT": "2m"}, []string{"CDC_KAFKA_TRANSACTION_TIMEOUT"},
			"at-least-once uses no transactions"},
		{"OAUTHBEARER with a password", map[string]string{"CDC_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "CDC_KAFKA_SASL_OAUTH_TOKEN": "t",
			"CDC_KAFKA_SASL_PASSWORD": testPassword}, []string{"CDC_KAFKA_SASL_MECHANISM"}, "is OAUTHBEARER, which uses a token"},
		{"SCRAM with a token", map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "CDC_KAFKA_SASL_USERNAME": "u",
			"CDC_KAFKA_SASL_PASSWORD": "p", "CDC_KAFKA_SASL_OAUTH_TOKEN_FILE": file}, []string{"CDC_KAFKA_SASL_MECHANISM"}, "an OAUTHBEARER token is set too"},
		{"PostgreSQL sslmode=disable with sslrootcert", map[string]string{"CDC_PG_URL": "postgres://cdc:" + testPassword + "@db/app?sslmode=disable&sslrootcert=" + testCAFile(t)},
			[]string{"CDC_PG_URL"}, "CDC_PG_URL: has sslmode=disable, which turns TLS off, but also sslrootcert"},
		{"PostgreSQL verify-full with sslrootcert", map[string]string{"CDC_PG_URL": "postgres://db/app?sslmode=verify-full&sslrootcert=" + testCAFile(t)}, nil, ""},
		{"watermark topic is a table's topic", map[string]string{"CDC_TABLES": "public.orders", "CDC_WATERMARK_TOPIC": "tidemark.public.orders"},
			[]string{"CDC_WATERMARK_TOPIC"}, "is the topic of table public.orders too"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, with(validEnv(), tt.set))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("LoadConfig: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			if got := problemVars(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("problems with %v, want %v:\n%v", got, tt.want, err)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error lacks %q:\n%v", tt.text, err)
			}
			if strings.Contains(err.Error(), testPassword) {
				t.Errorf("error shows the password:\n%v", err)
			}
		})
	}
}

// TestLoadConfigNameLimits: names past PostgreSQL's or Kafka's limits are refused with the limit
// named, and a huge value is quoted cut short.
func TestLoadConfigNameLimits(t *testing.T) {
	long := strings.Repeat("x", 64)
	tests := []struct {
		name string
		set  map[string]string
		want string
	}{
		{"slot of 64 bytes", map[string]string{"CDC_SLOT": long}, "is 64 bytes; PostgreSQL's limit for replication slot names is 63 (NAMEDATALEN-1)"},
		{"publication of 64 bytes", map[string]string{"CDC_PUBLICATION": long}, "is 64 bytes; PostgreSQL's limit for names is 63 bytes (NAMEDATALEN-1)"},
		{"table of 64 bytes", map[string]string{"CDC_TABLES": "public." + long}, "the table name is 64 bytes; PostgreSQL's limit for names is 63 bytes"},
		{"schema of 64 bytes", map[string]string{"CDC_TABLES": long + ".t"}, "the schema name is 64 bytes; PostgreSQL's limit"},
		{"quoted table of 64 bytes", map[string]string{"CDC_TABLES": `public."` + long + `"`}, "the table name is 64 bytes"},
		{"table of 100,000 bytes", map[string]string{"CDC_TABLES": "public." + strings.Repeat("t", 100_000)}, "the table name is 100000 bytes"},
		{"topic prefix of 201", map[string]string{"CDC_TOPIC_PREFIX": strings.Repeat("p", 201)}, "is 201 characters; Kafka's limit for topic names is 249; the prefix may use 200"},
		{"watermark topic of 250", map[string]string{"CDC_WATERMARK_TOPIC": strings.Repeat("w", 250)}, "is 250 characters; Kafka's limit for topic names is 249"},
		{"table topic over 249", map[string]string{"CDC_TOPIC_PREFIX": strings.Repeat("p", 200), "CDC_TABLES": "public." + strings.Repeat("t", 60)},
			"is 268 characters; Kafka's limit for topic names is 249: shorten CDC_TOPIC_PREFIX"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, with(validEnv(), tt.set))
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error lacks %q:\n%v", tt.want, err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if len(line) > 600 {
					t.Errorf("a problem of %d bytes: echoed values are not cut:\n%.300s", len(line), line)
				}
			}
		})
	}
}

// TestLoadConfigCutsEchoedValues: an invalid value is quoted up to 64 bytes, whole runes, with
// its length.
func TestLoadConfigCutsEchoedValues(t *testing.T) {
	for _, value := range []string{strings.Repeat("v", 10_000), strings.Repeat("é", 5_000), strings.Repeat("x", 64)} {
		_, err := load(t, with(validEnv(), map[string]string{"CDC_LOG_LEVEL": value, "CDC_KAFKA_BROKERS": "ok:1," + value}))
		if err == nil {
			t.Fatal("LoadConfig succeeded, want an error")
		}
		text := err.Error()
		if !utf8.ValidString(text) {
			t.Errorf("error text is not valid UTF-8: %q", text)
		}
		if len(value) > 64 && (len(text) > 700 || !strings.Contains(text, "… (10000 bytes)")) {
			t.Errorf("value of %d bytes echoed in %d bytes, or without its length:\n%s", len(value), len(text), text)
		}
		if len(value) == 64 && !strings.Contains(text, `CDC_LOG_LEVEL="`+value+`": want one of`) {
			t.Errorf("a 64-byte value is cut:\n%s", text)
		}
	}
}

// TestLoadConfigFilesDoNotBlock: every file the configuration names, a FIFO or a device among
// them, is refused at once with what it is.
func TestLoadConfigFilesDoNotBlock(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ca.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, ".postgresql"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(home, ".postgresql", "root.crt"), 0o600); err != nil {
		t.Fatal(err)
	}
	svcFile := filepath.Join(dir, "pg_service.conf")
	if err := os.WriteFile(svcFile, []byte("[shop]\nhost=db\nsslmode=verify-full\nsslrootcert="+fifo+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		set  map[string]string
		want string
	}{
		{"service file naming a FIFO", map[string]string{"CDC_PG_URL": "service=shop servicefile=" + svcFile},
			"CDC_PG_URL: service shop in " + svcFile + ": sslrootcert " + fifo + " is a named pipe"},
		{"PGSERVICE naming a FIFO", map[string]string{"CDC_PG_URL": "", "PGSERVICE": "shop", "PGSERVICEFILE": svcFile},
			"PGSERVICE: service shop in " + svcFile + ": sslrootcert " + fifo + " is a named pipe"},
		{"service file a FIFO", map[string]string{"CDC_PG_URL": "service=shop servicefile=" + fifo},
			"CDC_PG_URL: servicefile " + fifo + " is a named pipe"},
		{"Kafka CA FIFO", map[string]string{"CDC_KAFKA_TLS_CA_FILE": fifo}, "CDC_KAFKA_TLS_CA_FILE: " + fifo + " is a named pipe, not a regular file"},
		{"Kafka certificate device", map[string]string{"CDC_KAFKA_TLS_CERT_FILE": "/dev/zero", "CDC_KAFKA_TLS_KEY_FILE": fifo},
			"CDC_KAFKA_TLS_CERT_FILE: /dev/zero is a character device, not a regular file"},
		{"token file directory", map[string]string{"CDC_KAFKA_SASL_MECHANISM": "OAUTHBEARER", "CDC_KAFKA_SASL_OAUTH_TOKEN_FILE": dir},
			"CDC_KAFKA_SASL_OAUTH_TOKEN_FILE: " + dir + " is a directory, not a regular file"},
		{"sslrootcert FIFO in URL", map[string]string{"CDC_PG_URL": "postgres://cdc@db/app?sslmode=verify-full&sslrootcert=" + fifo},
			"CDC_PG_URL: sslrootcert " + fifo + " is a named pipe, not a regular file"},
		{"sslkey FIFO in DSN", map[string]string{"CDC_PG_URL": "host=db sslmode=require sslcert=/etc/hostname sslkey='" + fifo + "'"},
			"CDC_PG_URL: sslkey " + fifo + " is a named pipe"},
		{"sslrootcert device", map[string]string{"CDC_PG_URL": "postgres://cdc@db/app?sslrootcert=/dev/zero"},
			"CDC_PG_URL: sslrootcert /dev/zero is a character device"},
		{"PGSSLROOTCERT FIFO", map[string]string{"CDC_PG_URL": "", "PGHOST": "db", "PGSSLROOTCERT": fifo},
			"PGSSLROOTCERT: " + fifo + " is a named pipe"},
		{"passfile FIFO", map[string]string{"CDC_PG_URL": "postgres://cdc@db/app?passfile=" + fifo}, "CDC_PG_URL: passfile " + fifo + " is a named pipe"},
		{"default root.crt FIFO under HOME", map[string]string{"HOME": home}, "CDC_PG_URL: sslrootcert " + home + "/.postgresql/root.crt is a named pipe"},
		{"missing CA file", map[string]string{"CDC_KAFKA_TLS_CA_FILE": dir + "/nope.pem"}, "CDC_KAFKA_TLS_CA_FILE: " + dir + "/nope.pem cannot be opened: no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := load(t, with(validEnv(), tt.set))
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("LoadConfig blocked on a configured file")
			}
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error lacks %q:\n%v", tt.want, err)
			}
		})
	}
}

func TestConnSettings(t *testing.T) {
	tests := []struct {
		conn string
		want map[string]string
	}{
		{"postgres://u:p@h/db?sslrootcert=/a%20b.pem&sslmode=verify-full", map[string]string{"sslrootcert": "/a b.pem", "sslmode": "verify-full"}},
		{"postgresql://h1,h2/db?sslkey=/k", map[string]string{"sslkey": "/k"}},
		{"postgres://u:p?x@h/db?sslrootcert=/f&sslkey=/a+b", map[string]string{"sslrootcert": "/f", "sslkey": "/a+b"}},
		{"postgres://u:p@h/db?sslrootcert=%2Ftmp%2Ff%zz", map[string]string{"sslrootcert": "/tmp/f%zz"}},
		{`host=h sslrootcert = '/x y\'z.pem' sslkey=/a\ b`, map[string]string{"host": "h", "sslrootcert": `/x y'z.pem`, "sslkey": "/a b"}},
		{`host=h password='unterminated`, map[string]string{"host": "h", "password": "unterminated"}},
		{"host", map[string]string{}},
	}
	for _, tt := range tests {
		got := connSettings(tt.conn)
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("connSettings(%q)[%s] = %q, want %q", tt.conn, k, got[k], v)
			}
		}
	}
}

// FuzzPGFilesNeverBlock: whatever the connection string, if pgFiles lets it through, pgx parsing
// it does not block on a file: every file pgx reads was found and checked first. A FIFO stands in
// for the file that would hang; the seeds name it in every spelling pgx accepts.
func FuzzPGFilesNeverBlock(f *testing.F) {
	dir := f.TempDir()
	fifo := filepath.Join(dir, "f")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		f.Fatal(err)
	}
	svcFile := filepath.Join(dir, "pg_service.conf")
	if err := os.WriteFile(svcFile, []byte("[shop]\nhost=db\nsslrootcert="+fifo+"\n[other]\nsslkey="+fifo+"\nsslcert=/etc/hostname\n"), 0o600); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{
		"postgres://u:p@h/db?sslrootcert=" + fifo,
		"postgres://u:p?x@h/db?sslmode=verify-full&sslrootcert=" + fifo,
		"postgres://u:p?x@h/db?sslrootcert=" + fifo,
		"postgres://u:p/x@h/db?sslrootcert=" + fifo,
		"postgres://h/db?sslcert=/etc/hostname&sslkey=" + fifo,
		"postgres://h/db?sslrootcert=%2F" + fifo[1:],
		"postgres://h/db?sslrootcert=%20" + fifo + "%20",
		"postgres://h/db?sslrootcert= " + fifo + " ",
		"postgres://h/db?ssl%72ootcert=" + fifo,
		"postgres://h/db?sslrootcert=/nonexistent&sslrootcert=" + fifo,
		"postgresql://h/db?passfile=" + fifo,
		"host=h sslrootcert=" + fifo,
		"host=h sslrootcert='" + fifo + "'",
		"host=h sslrootcert = " + fifo,
		"host=h sslrootcert=/nonexistent sslrootcert=" + fifo,
		"host=h passfile=" + fifo,
		"host=h service=x servicefile=" + fifo,
		"service=shop servicefile=" + svcFile,
		"postgres://h/db?service=shop&servicefile=" + svcFile,
		"host=h sslrootcert=" + strings.ReplaceAll(fifo, "/", `\/`),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var c checker
		if !c.pgFiles(s, func(string) string { return "" }) {
			return // refused: pgx is never handed the string
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = pgconn.ParseConfig(s)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			// Release pgx's open with a writer before failing.
			if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			t.Fatalf("pgFiles let %q through, and pgx blocked reading a file", s)
		}
	})
}
