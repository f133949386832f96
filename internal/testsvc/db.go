package testsvc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// CreateDB creates database name on the server at base and returns its URL.
func CreateDB(ctx context.Context, base, name string) (string, error) {
	dbURL, err := WithDatabase(base, name)
	if err != nil {
		return "", err
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("connect %s: %w", Redact(base), err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return dbURL, nil
}

// DropDB drops database name and its replication slots, connecting through base: it ends the
// walsenders that hold the slots, retries until they let go, then drops the database WITH
// (FORCE), which ends its other connections.
func DropDB(ctx context.Context, base, name string) error {
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return fmt.Errorf("drop database %s: connect %s: %w", name, Redact(base), err)
	}
	defer conn.Close(context.Background())
	for {
		remaining, err := dropSlots(ctx, conn, name)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
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
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// dropSlots ends the walsenders of database db's slots, drops the inactive ones and returns how
// many are left.
func dropSlots(ctx context.Context, conn *pgx.Conn, db string) (int, error) {
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid)
		FROM pg_replication_slots WHERE database = $1 AND active_pid IS NOT NULL`, db); err != nil {
		return 0, fmt.Errorf("terminate slot holders: %w", err)
	}
	var dropped int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
		WHERE database = $1 AND NOT active) dropped`, db).Scan(&dropped)
	if err != nil && !isObjectInUse(err) {
		return 0, fmt.Errorf("drop replication slots: %w", err)
	}
	var remaining int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`,
		db).Scan(&remaining); err != nil {
		return 0, fmt.Errorf("list replication slots: %w", err)
	}
	return remaining, nil
}

// isObjectInUse reports a slot that became active between the check and the drop (SQLSTATE 55006).
func isObjectInUse(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "55006"
}

// WithDatabase returns rawURL with its database replaced by name.
func WithDatabase(rawURL, name string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// url.Error quotes the URL, password included: do not wrap it.
		return "", errors.New("parse PostgreSQL URL: not a postgres:// URL")
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return "", fmt.Errorf("parse PostgreSQL URL %s: scheme %q is not postgres", Redact(rawURL), u.Scheme)
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String(), nil
}

// Redact hides the password of a URL, for error messages.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

// RandomHex returns 2n random hexadecimal digits, for names of databases, topics and slots.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// PGMajor returns the major version of the server at pgURL (17 for 17.2), from
// server_version_num.
func PGMajor(ctx context.Context, pgURL string) (int, error) {
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return 0, fmt.Errorf("connect %s: %w", Redact(pgURL), err)
	}
	defer conn.Close(context.Background())
	var num int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&num); err != nil {
		return 0, fmt.Errorf("server version: %w", err)
	}
	return num / 10000, nil
}
