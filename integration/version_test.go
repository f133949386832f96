package integration

import (
	"os"
	"strconv"
	"testing"

	"github.com/tidemark/cdc/internal/testenv"
)

// TestServerVersion checks that the suite runs against the PostgreSQL version it was asked for
// (CDC_TEST_PG_VERSION, set by `make test-integration-pg17`): a matrix entry that silently fell
// back to another server would prove nothing.
func TestServerVersion(t *testing.T) {
	db := testenv.NewDB(t)
	var num, walLevel string
	if err := testenv.Conn(t, db).QueryRow(t.Context(),
		"SELECT current_setting('server_version_num'), current_setting('wal_level')").Scan(&num, &walLevel); err != nil {
		t.Fatalf("server version: %v", err)
	}
	n, err := strconv.Atoi(num)
	if err != nil {
		t.Fatalf("server_version_num %q: %v", num, err)
	}
	major := n / 10000
	if major != testenv.PGMajor(t) {
		t.Errorf("server_version_num %d, but testenv.PGMajor says %d", n, testenv.PGMajor(t))
	}
	if major < 15 {
		t.Errorf("PostgreSQL %d: the suite needs 15 or later", major)
	}
	if want := os.Getenv(testenv.EnvPGVersion); want != "" && strconv.Itoa(major) != want {
		t.Errorf("PostgreSQL %d, but %s=%s", major, testenv.EnvPGVersion, want)
	}
	if walLevel != "logical" {
		t.Errorf("wal_level = %q, want logical", walLevel)
	}
	t.Logf("PostgreSQL %s (server_version_num %d)", strconv.Itoa(major), n)
}
