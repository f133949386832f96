package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ConnectLib returns the folder of the Kafka Connect jars (connect-runtime, connect-json,
// connect-file and their dependencies), running `scripts/services.sh install-connect` (Maven
// Central, cached in $TIDEMARK_CACHE/connect-<version>/lib) when they are not there yet.
func ConnectLib(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: integration test skipped in -short mode")
	}
	cache := os.Getenv("TIDEMARK_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "tidemark")
	}
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
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "scripts", "services.sh"), "install-connect")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: install Kafka Connect jars: %v\n%s", err, tail(string(out), 3000))
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
	ports, err := freePorts(1)
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
	for k, v := range worker {
		w[k] = v
	}
	writeProps := func(name string, m map[string]string) string {
		var b strings.Builder
		for k, v := range m {
			fmt.Fprintf(&b, "%s=%s\n", k, strings.ReplaceAll(v, `\`, `\\`))
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	wp := writeProps("worker.properties", w)
	cp := writeProps("connector.properties", connector)
	logCfg := filepath.Join(dir, "log4j2.properties")
	if err := os.WriteFile(logCfg, []byte(`status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = org.apache.kafka.clients
logger.kafka.level = warn
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command("java", "-Xms128m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dlog4j2.configurationFile="+logCfg, "-cp", filepath.Join(lib, "*"),
		"org.apache.kafka.connect.cli.ConnectStandalone", wp, cp)
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
			t.Logf("Kafka Connect log:\n%s", tail(c.Log.String(), 20000))
		}
	})
	return c
}

// ConnectorStatus is GET /connectors/<name>/status.
type ConnectorStatus struct {
	Connector struct {
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID    int    `json:"id"`
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"tasks"`
}

// Running reports whether the connector and all its tasks (at least one) are RUNNING.
func (s *ConnectorStatus) Running() bool {
	if s.Connector.State != "RUNNING" || len(s.Tasks) == 0 {
		return false
	}
	for _, task := range s.Tasks {
		if task.State != "RUNNING" {
			return false
		}
	}
	return true
}

// Status asks the worker's REST API for the connector's status; an error while the worker is
// still starting (or has exited, which Exited tells).
func (c *Connect) Status(ctx context.Context) (*ConnectorStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.REST+"/connectors/"+c.Name+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status of connector %s: HTTP %d", c.Name, resp.StatusCode)
	}
	var s ConnectorStatus
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, err
	}
	return &s, nil
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
