package testenv

import (
	"context"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
)

// ConnectLib returns the folder of the Kafka Connect jars (connect-runtime, connect-json,
// connect-file and their dependencies), running `scripts/services.sh install-connect` (Maven
// Central, cached in $TIDEMARK_CACHE/connect-<version>/lib) when they are not there yet.
func ConnectLib(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: integration test skipped in -short mode")
	}
	cache := testsvc.CacheDir()
	find := func() string {
		matches, _ := filepath.Glob(filepath.Join(cache, "connect-*", "lib", ".complete"))
		if len(matches) == 0 {
			return ""
		}
		return filepath.Dir(matches[len(matches)-1])
	}
	if lib := find(); lib != "" {
		return lib
	}
	root, err := testsvc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "services.sh"), "install-connect")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: install Kafka Connect jars: %v\n%s", err, testsvc.Tail(string(out), 3000))
	}
	lib := find()
	if lib == "" {
		t.Fatalf("testenv: no Kafka Connect jars under %s after install-connect", cache)
	}
	return lib
}

// Connect is a Kafka Connect standalone worker (org.apache.kafka.connect.cli.ConnectStandalone)
// running one connector, with its REST API on 127.0.0.1.
type Connect struct {
	Dir  string // worker folder: properties, offsets, log
	REST string // http://127.0.0.1:<port>
	Name string // connector name
	Log  *LogBuffer

	cmd  *exec.Cmd
	done chan error
}

// StartConnect runs a standalone worker against brokers with worker (worker properties beyond
// bootstrap.servers, listeners and offset.storage.file.filename) and one connector (its
// properties, name included). It is stopped at cleanup; its log is printed when the test failed.
func StartConnect(t testing.TB, brokers []string, worker, connector map[string]string) *Connect {
	t.Helper()
	lib := ConnectLib(t)
	dir := t.TempDir()
	ports, err := testsvc.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	c := &Connect{Dir: dir, REST: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), Name: connector["name"],
		Log: &LogBuffer{}, done: make(chan error, 1)}
	w := map[string]string{
		"bootstrap.servers":            strings.Join(brokers, ","),
		"listeners":                    c.REST,
		"offset.storage.file.filename": filepath.Join(dir, "offsets"),
		"offset.flush.interval.ms":     "1000",
	}
	maps.Copy(w, worker)
	files, err := testsvc.WriteConnectFiles(dir, w, connector)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	c.cmd = files.Command(lib, []string{"-Xms128m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"})
	c.cmd.Stdout, c.cmd.Stderr = c.Log, c.Log
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("testenv: start Kafka Connect: %v", err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if t.Failed() {
			t.Logf("Kafka Connect log:\n%s", testsvc.Tail(c.Log.String(), 20000))
		}
	})
	return c
}

// ConnectorStatus is GET /connectors/<name>/status.
type ConnectorStatus = testsvc.ConnectorStatus

// Status asks the worker's REST API for the connector's status; an error while the worker is
// still starting (or has exited, which Exited tells).
func (c *Connect) Status(ctx context.Context) (*ConnectorStatus, error) {
	return testsvc.GetConnectorStatus(ctx, c.REST, c.Name)
}

// Exited reports whether the worker process has ended.
func (c *Connect) Exited() bool {
	select {
	case err := <-c.done:
		c.done <- err
		return true
	default:
		return false
	}
}
