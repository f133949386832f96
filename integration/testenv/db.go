package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbTimeout bounds each helper's round trips to PostgreSQL.
const dbTimeout = time.Minute

// NewDB creates a fresh database tidemark_<random> on the shared server and returns its URL.
// At cleanup it terminates the database's replication connections, drops its replication slots
// and drops the database.
func NewDB(t testing.TB) string {
	t.Helper()
	base := PGURL(t)
	name := "tidemark_" + randomHex(6)
	dbURL, err := withDatabase(base, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	Exec(t, base, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		defer cancel()
		if err := dropDB(ctx, base, name); err != nil {
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
			t.Fatalf("testenv: exec %q: %v", abbreviate(stmt, 200), err)
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
		t.Fatalf("testenv: connect %s: %v", redact(dbURL), err)
	}
	return conn
}

// dropDB drops database name and its replication slots, connecting through base.
func dropDB(ctx context.Context, base, name string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("drop database %s: connect %s: %w", name, redact(base), err)
	}
	defer conn.Close(context.Background())

	// A slot in use cannot be dropped: end its walsender, then retry until it lets go.
	for {
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid)
			FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, name); err != nil {
			return fmt.Errorf("drop database %s: terminate slot holders: %w", name, err)
		}
		var dropped int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
			WHERE database = $1 AND NOT active) dropped`, name).Scan(&dropped)
		if err != nil && !isObjectInUse(err) {
			return fmt.Errorf("drop database %s: drop replication slots: %w", name, err)
		}
		var remaining int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`,
			name).Scan(&remaining); err != nil {
			return fmt.Errorf("drop database %s: list replication slots: %w", name, err)
		}
		if remaining == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drop database %s: %d replication slot(s) still in use: %w", name, remaining, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	// WITH (FORCE) ends the remaining ordinary connections.
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// isObjectInUse reports a slot that became active between the check and the drop (SQLSTATE 55006).
func isObjectInUse(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "55006"
}

// withDatabase returns rawURL with its database replaced by name.
func withDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the URL, password included: do not wrap it.
		return "", errors.New("parse PostgreSQL URL: not a postgres:// URL")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("parse PostgreSQL URL %s: scheme %q is not postgres", redact(rawURL), u.Scheme)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// redact hides the password of a URL for error messages.
func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

func abbreviate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
