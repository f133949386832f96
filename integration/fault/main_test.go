package fault

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// cdcBinary and applyBinary (tidemark-apply) are built once by TestMain.
var cdcBinary, applyBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tidemark-fault-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cdcBinary = filepath.Join(dir, "cdc")
	applyBinary = filepath.Join(dir, "tidemark-apply")
	for _, b := range []struct{ out, pkg string }{{cdcBinary, "./cmd/cdc"}, {applyBinary, "./cmd/tidemark-apply"}} {
		args := []string{"build", "-o", b.out}
		if os.Getenv("CDC_TEST_RACE") != "" {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, b.pkg)...)
		cmd.Dir = filepath.Join("..", "..")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", b.pkg, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
