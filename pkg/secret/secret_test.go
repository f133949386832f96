package secret

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{name: "postgres URL", in: "postgres://alice:s3cret@db:5432/app", want: "postgres://alice:xxxxx@db:5432/app"},
		{name: "postgresql URL", in: "postgresql://alice:s3cret@db/app?sslmode=require", want: "postgresql://alice:xxxxx@db/app?sslmode=require"},
		{name: "other scheme", in: "mysql://alice:s3cret@db/app", want: "mysql://alice:xxxxx@db/app"},
		{name: "no scheme", in: "alice:s3cret@db/app", want: "alice:xxxxx@db/app"},
		{name: "one slash", in: "postgres:/alice:s3cret@db/app", want: "postgres:xxxxx@db/app"},
		{name: "no password", in: "postgres://alice@db/app", want: "postgres://alice@db/app"},
		{name: "no user info", in: "postgres://db:5432/app", want: "postgres://db:5432/app"},
		{name: "empty user", in: "postgres://:s3cret@db/app", want: "postgres://:xxxxx@db/app"},
		{name: "percent-encoded", in: "postgres://alice:s%40c%2Fr%3Aet@db/app", want: "postgres://alice:xxxxx@db/app"},
		{name: "unencoded @", in: "postgres://alice:p@ss@db/app", want: "postgres://alice:xxxxx@db/app"},
		{name: "unencoded / ? #", in: "postgres://alice:p/a?s#s@db/app", want: "postgres://alice:xxxxx@db/app"},
		{name: "digits and slash", in: "postgres://alice:1234/5678@db/app", want: "postgres://alice:xxxxx@db/app"},
		{name: "bad port", in: "postgres://alice:s3cret@db:port/app", want: "postgres://alice:xxxxx@db:port/app"},
		{name: "bad escape", in: "postgres://alice:s3%zzcret@db/app", want: "postgres://alice:xxxxx@db/app"},
		{name: "query password", in: "postgres://db/app?sslmode=disable&password=s3cret&application_name=x", want: "postgres://db/app?sslmode=disable&password=xxxxx&application_name=x"},
		{name: "query sslpassword", in: "postgres://db/app?sslpassword=s3cret", want: "postgres://db/app?sslpassword=xxxxx"},
		{name: "query password with &", in: "postgres://db/app?password=s3&cr&sslmode=disable", want: "postgres://db/app?password=xxxxx&sslmode=disable"},
		{name: "query password with @ and port", in: "postgres://db:5432/app?password=s3@cret", want: "postgres://db:xxxxx@cret"},
		{name: "dsn", in: "host=db user=alice password=s3cret dbname=app", want: "host=db user=alice password=xxxxx dbname=app"},
		{name: "dsn spaces around =", in: "host=db password = s3cret dbname=app", want: "host=db password = xxxxx dbname=app"},
		{name: "dsn quoted", in: `host=db password='se cr\'et' dbname=app`, want: "host=db password=xxxxx dbname=app"},
		{name: "dsn unterminated quote", in: `host=db password='se cret dbname=app`, want: "host=db password=xxxxx"},
		{name: "dsn escaped space", in: `host=db password=se\ cret dbname=app`, want: "host=db password=xxxxx dbname=app"},
		{name: "dsn sslpassword", in: "host=db sslpassword=s3cret", want: "host=db sslpassword=xxxxx"},
		{name: "dsn upper case", in: "host=db PASSWORD=s3cret", want: "host=db PASSWORD=xxxxx"},
		{name: "dsn trailing backslash", in: `host=db password=s3cret\`, want: "host=db password=xxxxx"},
		{name: "dsn unquoted space", in: "host=db password=abc def123 dbname=app", want: "host=db password=xxxxx dbname=app"},
		{name: "dsn unquoted spaces at end", in: "host=db password=abc def123  ghi ", want: "host=db password=xxxxx "},
		{name: "dsn unquoted space, key with spaces", in: "password=abc def123 port = 5432", want: "password=xxxxx port = 5432"},
		{name: "dsn unquoted space and a word=", in: "host=db password=abc x=y dbname=app", want: "host=db password=xxxxx dbname=app"},
		{name: "url space in password", in: "postgres://alice:abc def123@db/app", want: "postgres://alice:xxxxx@db/app"},
		{name: "query space in password", in: "postgres://db/app?password=abc def123&sslmode=disable", want: "postgres://db/app?password=xxxxx&sslmode=disable"},
		{name: "empty", in: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Redact(tt.in); got != tt.want {
				t.Fatalf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestScrub(t *testing.T) {
	tests := []struct {
		name    string
		conn    string
		text    string
		secrets []string
	}{
		{name: "password in dial error", conn: "postgres://alice:pass@word@db/app", text: "failed to connect to `user=alice database=app`: word@db:5432 (word@db): no such host; pass@word",
			secrets: []string{"pass", "word"}},
		{name: "fragments of an unencoded /", conn: "postgres://alice:pass/word@db/app", text: `cannot parse: invalid port "pass" (database "word@db/app")`,
			secrets: []string{"pass", "word"}},
		{name: "decoded", conn: "postgres://alice:s%40cret@db/app", text: "bad: s@cret", secrets: []string{"s@cret"}},
		{name: "query decoded", conn: "postgres://db/app?password=s%26cret", text: "bad: s&cret", secrets: []string{"s&cret"}},
		{name: "query unencoded &", conn: "postgres://db/app?password=s&cret&sslmode=disable", text: "bad: s&cret; unknown key cret", secrets: []string{"s&cret", "cret"}},
		{name: "dsn unescaped", conn: `host=db password='se cr\'et'`, text: "bad: se cr'et", secrets: []string{"se cr'et"}},
		{name: "dsn unquoted space", conn: "host=db password=abc def123 dbname=app", text: `failed to parse as keyword/value: missing "=" after "def123" in connection info string`,
			secrets: []string{"def123", "abc"}},
		{name: "dsn unquoted space, short word", conn: "host=db password=abc de dbname=app", text: `missing "=" after "de" in connection info string`,
			secrets: []string{`"de"`}},
		{name: "embedded DSN with space", conn: "", text: "cannot parse host=db password=abc def123 dbname=app: bad", secrets: []string{"def123"}},
		{name: "embedded URL", conn: "", text: "cannot parse `postgres://bob:hunter22@db/app`: bad", secrets: []string{"hunter22"}},
		{name: "embedded DSN", conn: "", text: "cannot parse `host=db password=hunter22`: bad", secrets: []string{"hunter22"}},
		{name: "embedded query", conn: "", text: "cannot parse `postgres://db/app?password=hunter22&x=y`: bad", secrets: []string{"hunter22"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Scrub(tt.text, tt.conn)
			for _, pw := range tt.secrets {
				if strings.Contains(got, pw) {
					t.Fatalf("Scrub(%q) = %q: contains %q", tt.text, got, pw)
				}
			}
		})
	}
}

func TestScrubErrorKeepsChain(t *testing.T) {
	conn := "postgres://alice:s3cret@db/app"
	err := ScrubError(fmt.Errorf("connect %s: %w", conn, context.DeadlineExceeded), conn)
	if strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error text %q contains the password", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("errors.Is(%v, context.DeadlineExceeded) = false", err)
	}
	if ScrubError(nil, conn) != nil {
		t.Fatal("ScrubError(nil) is not nil")
	}
}
