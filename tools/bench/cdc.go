package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
)

// buildCDC builds bin/cdc in the repository, as `make build` does, and copies it into the work
// folder so that a rebuild by someone else during the run changes nothing.
func buildCDC(ctx context.Context, root, work string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", "bin/cdc", "./cmd/cdc")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/cdc: %w\n%s", err, out)
	}
	src, err := os.Open(filepath.Join(root, "bin", "cdc"))
	if err != nil {
		return "", fmt.Errorf("open built cdc: %w", err)
	}
	defer src.Close()
	bin := filepath.Join(work, "cdc")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", fmt.Errorf("copy cdc: %w", err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return "", fmt.Errorf("copy cdc: %w", err)
	}
	if err := dst.Close(); err != nil {
		return "", fmt.Errorf("copy cdc: %w", err)
	}
	return bin, nil
}

// cdcProc is one running cdc process. Its output goes to a log file.
type cdcProc struct {
	cmd     *exec.Cmd
	logPath string
	started time.Time
	done    chan struct{}
	err     error // valid once done is closed
	// hwmKiB is VmHWM, the process's own peak resident set, read just before stop signals it.
	hwmKiB int64
}

// startCDC runs bin (under taskset -c when vars has cpusVar) with only PATH, HOME, TMPDIR, the Go runtime's GOGC (when the bench has it:
// `GOGC=200 go run ./tools/bench` tries another collector setting) and vars in its environment:
// cdc refuses unknown CDC_* variables, so the bench's own (CDC_TEST_*) must not leak into it.
func startCDC(bin, logPath, tmp string, vars map[string]string) (*cdcProc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open cdc log: %w", err)
	}
	cmd := exec.Command(bin)
	if cpus := vars[cpusVar]; cpus != "" {
		cmd = exec.Command("taskset", "-c", cpus, bin) // taskset execs bin: the same process
	}
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + tmp}
	if gogc, ok := os.LookupEnv("GOGC"); ok {
		cmd.Env = append(cmd.Env, "GOGC="+gogc)
	}
	for k, v := range vars {
		if k != cpusVar {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	p := &cdcProc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start cdc: %w", err)
	}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *cdcProc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM and waits up to timeout, then kills. It returns an error when cdc did not
// exit cleanly.
func (p *cdcProc) stop(timeout time.Duration) error {
	if done, err := p.exited(); done {
		return exitError(err, p.logPath)
	}
	p.hwmKiB = max(p.hwmKiB, vmHWM(p.cmd.Process.Pid))
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return exitError(p.err, p.logPath)
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("cdc did not stop within %s of SIGTERM (killed); log %s", timeout, p.logPath)
	}
}

func exitError(err error, logPath string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("cdc exited: %w; log %s:\n%s", err, logPath, tailFile(logPath, 15))
}

// usage returns the CPU time and peak resident memory of an exited cdc (zero while it runs).
//
// The peak is VmHWM as stop read it. The exit status's ru_maxrss is no use here: Linux carries
// the peak of the memory the process had before exec into it, and Go starts children with
// vfork, so that memory is the bench's own (over a GiB after reading topics back). Only a
// process that exited by itself, which the scenarios treat as a failure, falls back to it.
func (p *cdcProc) usage() (cpuSeconds float64, peakRSSMiB float64) {
	if done, _ := p.exited(); !done || p.cmd.ProcessState == nil {
		return 0, 0
	}
	st := p.cmd.ProcessState
	cpuSeconds = (st.UserTime() + st.SystemTime()).Seconds()
	if p.hwmKiB > 0 {
		peakRSSMiB = float64(p.hwmKiB) / 1024
	} else if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		peakRSSMiB = float64(ru.Maxrss) / 1024 // KiB on Linux
	}
	return cpuSeconds, peakRSSMiB
}

// vmHWM returns the VmHWM line of /proc/<pid>/status in KiB, or 0 if it cannot be read.
func vmHWM(pid int) int64 { return procStatusKiB(pid, "VmHWM:") }

// procStatusKiB returns the field of /proc/<pid>/status (its name with the colon) in KiB, or 0
// if it cannot be read.
func procStatusKiB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// check returns an error if cdc has exited already: the scenarios call it while waiting.
func (p *cdcProc) check() error {
	if done, err := p.exited(); done {
		if err == nil {
			return fmt.Errorf("cdc exited unexpectedly with status 0; log %s:\n%s", p.logPath, tailFile(p.logPath, 15))
		}
		return exitError(err, p.logPath)
	}
	return nil
}

// logTime returns the time of the first line of the log whose message is msg (text format:
// `time=... level=... msg="..."`), and whether there is one.
func (p *cdcProc) logTime(msg string) (time.Time, bool) {
	f, err := os.Open(p.logPath)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	needle := "msg=" + quoteLogValue(msg)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, needle) {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return time.Time{}, false
		}
		return t, true
	}
	return time.Time{}, false
}

// quoteLogValue quotes like slog's text handler: only values with spaces or quotes.
func quoteLogValue(s string) string {
	if strings.ContainsAny(s, " \"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}

// tailFile returns the last n lines of a file, for error messages.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return testsvc.Tail(string(b), n)
}
