package testsvc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Environment variables naming servers that are already running.
const (
	EnvPGURL   = "CDC_TEST_PG_URL"        // PostgreSQL URL of an already running server
	EnvBrokers = "CDC_TEST_KAFKA_BROKERS" // comma-separated Kafka seed brokers
)

// FromEnv returns the servers named by EnvPGURL and EnvBrokers; both empty when neither is set,
// an error when only one is.
func FromEnv(getenv func(string) string) (pgURL string, brokers []string, err error) {
	pgURL = strings.TrimSpace(getenv(EnvPGURL))
	brokers = SplitList(getenv(EnvBrokers))
	switch {
	case pgURL == "" && len(brokers) == 0:
		return "", nil, nil
	case pgURL == "":
		return "", nil, fmt.Errorf("%s is set but %s is not: set both or neither", EnvBrokers, EnvPGURL)
	case len(brokers) == 0:
		return "", nil, fmt.Errorf("%s is set but %s is not: set both or neither", EnvPGURL, EnvBrokers)
	}
	return pgURL, brokers, nil
}

// SplitList splits a comma-separated list, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// modulePath identifies the repository's go.mod.
const modulePath = "github.com/tidemark/cdc"

// RepoRoot walks up from the working folder to the go.mod of github.com/tidemark/cdc.
func RepoRoot() (string, error) {
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

// CacheDir is the jar cache of scripts/services.sh: $TIDEMARK_CACHE, or ~/.cache/tidemark.
func CacheDir() string {
	if c := os.Getenv("TIDEMARK_CACHE"); c != "" {
		return c
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "tidemark")
}

// Tail returns the last n lines of s, for error messages.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Abbreviate folds s's white space and cuts it to n bytes, for error messages.
func Abbreviate(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
