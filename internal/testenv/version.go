package testenv

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tidemark/cdc/internal/testsvc"
)

// EnvPGVersion names the PostgreSQL major version the tests must run against ("15", "17"). When
// set, local and Docker servers are started in that version, and a server of another version,
// including one named by CDC_TEST_PG_URL, fails every test: a run meant for 17 never passes on 15.
const EnvPGVersion = "CDC_TEST_PG_VERSION"

// wantPGVersion returns the major version EnvPGVersion asks for, 0 when unset.
func wantPGVersion(getenv func(string) string) (int, error) {
	v := strings.TrimSpace(getenv(EnvPGVersion))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 10 {
		return 0, fmt.Errorf("%s=%q: want a PostgreSQL major version such as 15 or 17", EnvPGVersion, v)
	}
	return n, nil
}

// checkPGVersion reads the major version of the server at pgURL and compares it with
// EnvPGVersion.
func checkPGVersion(ctx context.Context, pgURL string) (int, error) {
	want, err := wantPGVersion(os.Getenv)
	if err != nil {
		return 0, err
	}
	got, err := testsvc.PGMajor(ctx, pgURL)
	if err != nil {
		return 0, err
	}
	if want != 0 && got != want {
		return got, fmt.Errorf("%s=%d but the PostgreSQL server is version %d", EnvPGVersion, want, got)
	}
	return got, nil
}

// PGMajor returns the major version of the shared PostgreSQL server (15, 17). When EnvPGVersion
// is set, it is that version: testenv refuses a server of another.
func PGMajor(t testing.TB) int {
	t.Helper()
	return get(t).pgMajor
}

// PGMajor returns the major version of the private PostgreSQL server.
func (s *Servers) PGMajor() int {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	n, err := checkPGVersion(ctx, s.PGURL())
	if err != nil {
		s.t.Fatalf("testenv: %v", err)
	}
	return n
}
