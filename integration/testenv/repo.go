package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// modulePath identifies the repository's go.mod.
const modulePath = "github.com/tidemark/cdc"

// RepoRoot returns the repository's root folder (the one holding go.mod of github.com/tidemark/cdc).
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return root
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository root: %w", err)
	}
	for {
		ok, err := isModuleRoot(filepath.Join(dir, "go.mod"))
		if err != nil {
			return "", fmt.Errorf("find repository root: %w", err)
		}
		if ok {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository root: no go.mod of " + modulePath + " above the working folder")
		}
		dir = parent
	}
}

// isModuleRoot reports whether path is a go.mod declaring modulePath.
func isModuleRoot(path string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == modulePath, nil
		}
	}
	return false, sc.Err()
}
