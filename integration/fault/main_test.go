package fault

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// cdcBinary is built once by TestMain.
var cdcBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tidemark-fault-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cdcBinary = filepath.Join(dir, "cdc")
	args := []string{"build", "-o", cdcBinary}
	if os.Getenv("CDC_TEST_RACE") != "" {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/cdc")...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "build cdc: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
