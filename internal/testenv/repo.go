package testenv

import (
	"testing"

	"github.com/tidemark/cdc/internal/testsvc"
)

// RepoRoot returns the repository's root folder (the one holding go.mod of github.com/tidemark/cdc).
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := testsvc.RepoRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return root
}
