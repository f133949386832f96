package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tidemark/cdc/internal/testsvc"
)

// dbTimeout bounds each helper's round trips to PostgreSQL.
const dbTimeout = time.Minute

// NewDB creates a fresh database tidemark_<random> on the shared server and returns its URL.
// At cleanup it terminates the database's replication connections, drops its replication slots
// and drops the database.
func NewDB(t testing.TB) string {
	t.Helper()
	return newDB(t, PGURL(t))
}

// newDB creates a fresh database on the server at base, dropped at cleanup.
func newDB(t testing.TB, base string) string {
	t.Helper()
	name := "tidemark_" + testsvc.RandomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	dbURL, err := testsvc.CreateDB(ctx, base, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		defer cancel()
		if err := testsvc.DropDB(ctx, base, name); err != nil {
			t.Errorf("testenv: %v", err)
		}
	})
	return dbURL
}

// Exec runs each statement on the database at dbURL, in order, each in its own implicit
// transaction. A statement may hold several commands separated by semicolons. It fails the test
// on the first error.
func Exec(t testing.TB, dbURL string, sql ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	conn := connect(ctx, t, dbURL)
	defer conn.Close(context.Background())
	for _, stmt := range sql {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("testenv: exec %q: %v", testsvc.Abbreviate(stmt, 200), err)
		}
	}
}

// Conn opens a connection to dbURL that is closed at cleanup.
func Conn(t testing.TB, dbURL string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	conn := connect(ctx, t, dbURL)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func connect(ctx context.Context, t testing.TB, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("testenv: connect %s: %v", testsvc.Redact(dbURL), err)
	}
	return conn
}
