// Package integration tests the built cdc binary from outside, against a real PostgreSQL with
// wal_level=logical and a real Apache Kafka broker (see internal/testenv for where they come
// from). Assertions are invariants: topic state equals table state, per-key order, nothing below
// a watermark missing, the slot never confirmed past what Kafka holds.
package integration

import (
	"fmt"
	"os"
	"testing"

	"github.com/tidemark/cdc/internal/testenv"
)

func TestMain(m *testing.M) {
	bin, cleanup, err := buildCDC()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cdcBinary = bin
	code := testenv.Main(m)
	cleanup()
	os.Exit(code)
}
