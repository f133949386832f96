package testsvc

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// connectLog4j is a Kafka Connect worker's log configuration: INFO to the console, the Kafka
// clients' chatter at WARN.
const connectLog4j = `status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.kafka.name = org.apache.kafka.clients
logger.kafka.level = warn
`

// ConnectFiles are the files of a Kafka Connect standalone worker running one connector.
type ConnectFiles struct {
	Worker, Connector, Log4j string
}

// WriteConnectFiles writes a standalone worker's properties, its connector's and its log
// configuration into dir (created when missing).
func WriteConnectFiles(dir string, worker, connector map[string]string) (ConnectFiles, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ConnectFiles{}, fmt.Errorf("create %s: %w", dir, err)
	}
	f := ConnectFiles{
		Worker:    filepath.Join(dir, "worker.properties"),
		Connector: filepath.Join(dir, "connector.properties"),
		Log4j:     filepath.Join(dir, "log4j2.properties"),
	}
	if err := WriteProperties(f.Worker, worker); err != nil {
		return f, err
	}
	if err := WriteProperties(f.Connector, connector); err != nil {
		return f, err
	}
	if err := os.WriteFile(f.Log4j, []byte(connectLog4j), 0o644); err != nil {
		return f, fmt.Errorf("write %s: %w", f.Log4j, err)
	}
	return f, nil
}

// Command returns the command that runs the worker (ConnectStandalone) with the jars of lib and
// the JVM flags jvm. The caller sets its output and starts it.
func (f ConnectFiles) Command(lib string, jvm []string) *exec.Cmd {
	args := append(append([]string{}, jvm...), "-Dlog4j2.configurationFile="+f.Log4j,
		"-cp", filepath.Join(lib, "*"), "org.apache.kafka.connect.cli.ConnectStandalone", f.Worker, f.Connector)
	return exec.Command("java", args...)
}

// WriteProperties writes a Java properties file, keys sorted (0600: it may hold a password).
func WriteProperties(path string, m map[string]string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s=%s\n", k, strings.ReplaceAll(m[k], `\`, `\\`))
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ConnectorStatus is GET /connectors/<name>/status of a Kafka Connect worker.
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

// GetConnectorStatus asks the worker's REST API at rest (http://host:port) for the connector's
// status; an error while the worker is still starting.
func GetConnectorStatus(ctx context.Context, rest, name string) (*ConnectorStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rest+"/connectors/"+name+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status of connector %s: HTTP %d", name, resp.StatusCode)
	}
	var s ConnectorStatus
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return nil, fmt.Errorf("status of connector %s: %w", name, err)
	}
	return &s, nil
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

// Failed returns an error naming the connector (name) or task that has FAILED, with its trace;
// nil when none has.
func (s *ConnectorStatus) Failed(name string) error {
	if s.Connector.State == "FAILED" {
		return fmt.Errorf("connector %s FAILED: %s", name, Abbreviate(s.Connector.Trace, 2000))
	}
	for _, t := range s.Tasks {
		if t.State == "FAILED" {
			return fmt.Errorf("connector %s: task FAILED: %s", name, Abbreviate(t.Trace, 2000))
		}
	}
	return nil
}
