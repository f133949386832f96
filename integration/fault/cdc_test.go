package fault

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testenv"
)

// supervisor runs cdc (or another binary: tidemark-apply) the way a container runtime would:
// started again after every exit, whether the test killed it or it died on its own.
type supervisor struct {
	t    testing.TB
	bin  string
	name string
	vars map[string]string
	log  *testenv.LogBuffer

	cmd  *exec.Cmd
	done chan error
	runs int

	kills     int // SIGKILLs sent by the test
	restarts  int // starts after the first
	unplanned int // exits the test did not cause
}

func newSupervisor(t testing.TB, vars map[string]string) *supervisor {
	t.Helper()
	return newBinarySupervisor(t, cdcBinary, "cdc", vars)
}

// newBinarySupervisor supervises bin, called name in the test's messages.
func newBinarySupervisor(t testing.TB, bin, name string, vars map[string]string) *supervisor {
	t.Helper()
	s := &supervisor{t: t, bin: bin, name: name, vars: vars, log: &testenv.LogBuffer{}}
	t.Cleanup(func() {
		if s.running() {
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("%s log (tail):\n%s", s.name, s.tail(16000))
		}
	})
	return s
}

func (s *supervisor) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + s.t.TempDir()}
	for k, v := range s.vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	s.runs++
	fmt.Fprintf(s.log, "=== fault: %s run %d starts at %s\n", s.name, s.runs, time.Now().Format(time.StampMilli))
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.name, err)
	}
	if s.runs > 1 {
		s.restarts++
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	s.cmd, s.done = cmd, done
}

func (s *supervisor) running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case err := <-s.done:
		s.done <- err
		return false
	default:
		return true
	}
}

// check restarts cdc if it exited on its own, and says so.
func (s *supervisor) check() {
	s.t.Helper()
	if s.cmd == nil || s.running() {
		return
	}
	err := <-s.done
	s.unplanned++
	s.t.Errorf("%s run %d exited on its own (%v); log tail:\n%s", s.name, s.runs, err, s.tail(3000))
	s.start()
}

// kill sends SIGKILL, waits for the exit and starts cdc again.
func (s *supervisor) kill() {
	s.t.Helper()
	s.check()
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.kills++
	fmt.Fprintf(s.log, "=== fault: %s run %d killed (SIGKILL) at %s\n", s.name, s.runs, time.Now().Format(time.StampMilli))
	s.start()
}

// stop sends SIGTERM and returns the exit code; it fails the test if cdc takes over a minute.
func (s *supervisor) stop() int {
	s.t.Helper()
	s.check()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(time.Minute):
		_ = s.cmd.Process.Kill()
		err := <-s.done
		s.done <- err
		s.t.Errorf("%s did not stop within a minute of SIGTERM; log tail:\n%s", s.name, s.tail(3000))
	}
	return s.cmd.ProcessState.ExitCode()
}

func (s *supervisor) tail(n int) string {
	out := s.log.String()
	if len(out) > n {
		out = "..." + out[len(out)-n:]
	}
	return out
}

// mark writes a line into the log of all runs and returns the log's length before it: a
// position for since.
func (s *supervisor) mark(what string) int {
	n := len(s.log.String())
	fmt.Fprintf(s.log, "=== fault: %s at %s\n", what, time.Now().Format(time.StampMilli))
	return n
}

// since returns the log of all runs from position at (see mark).
func (s *supervisor) since(at int) string { return s.log.String()[at:] }

// count returns how often substr occurs in the logs of all runs.
func (s *supervisor) count(substr string) int { return strings.Count(s.log.String(), substr) }
