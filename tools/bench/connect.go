package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/tidemark/cdc/internal/testsvc"
)

// connectWorker is one Kafka Connect standalone worker running Debezium's PostgreSQL connector
// with its own slot, publication, topic prefix and offset file.
type connectWorker struct {
	s        *scenario
	profile  string
	producer map[string]string
	dir      string
	lib      string
	plugins  string
	worker   map[string]string
	conn     map[string]string
	topics   []string
	start    map[string]map[int32]int64 // end offsets before the current run
}

func (s *scenario) newConnectWorker(lib, plugins, profile string, producer, converter map[string]string) *connectWorker {
	dir := filepath.Join(s.tmp, "connect-"+profile)
	prefix := s.prefix + ".dbz_" + profile
	w := &connectWorker{s: s, profile: profile, producer: producer, dir: dir, lib: lib, plugins: plugins,
		worker: map[string]string{
			"bootstrap.servers":              strings.Join(s.b.svc.brokers, ","),
			"key.converter":                  "org.apache.kafka.connect.json.JsonConverter",
			"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
			"key.converter.schemas.enable":   "false",
			"value.converter.schemas.enable": "false",
			"offset.storage.file.filename":   filepath.Join(dir, "offsets"),
			"offset.flush.interval.ms":       "10000", // connect-standalone.properties
			"plugin.path":                    plugins,
		},
		conn: map[string]string{
			"name":                        "dbz-" + profile,
			"connector.class":             "io.debezium.connector.postgresql.PostgresConnector",
			"tasks.max":                   "1",
			"topic.prefix":                prefix,
			"plugin.name":                 "pgoutput",
			"slot.name":                   s.slot + "_dbz_" + profile,
			"publication.name":            "dbz_pub_" + profile,
			"publication.autocreate.mode": "filtered",
			"table.include.list":          strings.Join(pgbenchTables, ","),
			"snapshot.mode":               "initial",
		}}
	for k, v := range producer {
		w.worker[k] = v
	}
	for k, v := range converter {
		w.worker[k] = v
	}
	for _, t := range pgbenchTables {
		w.topics = append(w.topics, prefix+"."+t)
	}
	return w
}

// run starts the worker, waits until its topics hold want more records than before, stops it
// (SIGTERM: Connect commits the connector's offsets) and returns the run's figures.
func (w *connectWorker) run(ctx context.Context, phase string, want int64) (toolRun, error) {
	b := w.s.b
	var err error
	if w.start, err = b.k.endOffsets(ctx, w.topics...); err != nil {
		return toolRun{}, err
	}
	b.runs++
	logPath := filepath.Join(b.work, fmt.Sprintf("%02d-%s-connect-%s-%s.log", b.runs, w.s.name, w.profile, phase))
	files, rest, err := w.configure()
	if err != nil {
		return toolRun{}, err
	}
	p, err := startProcess(files.Command(w.lib, connectJVM), logPath)
	if err != nil {
		return toolRun{}, err
	}
	defer stopJVM(p)
	b.logf("debezium: Kafka Connect (%s producer) started for the %s (log %s)", w.profile, phase, logPath)
	lastStatus := time.Now()
	check := func() error {
		if err := p.check(); err != nil {
			return err
		}
		if time.Since(lastStatus) < 2*time.Second {
			return nil
		}
		lastStatus = time.Now()
		return connectorFailed(ctx, rest, w.conn["name"])
	}
	var doneAt time.Time
	var got int64
	for {
		ends, err := b.k.endOffsets(ctx, w.topics...)
		if err != nil {
			return toolRun{}, err
		}
		got = 0
		for t, ps := range ends {
			for part, e := range ps {
				got += e - w.start[t][part]
			}
		}
		if got >= want {
			doneAt = time.Now()
			break
		}
		if err := check(); err != nil {
			return toolRun{}, fmt.Errorf("%d of %d records: %w", got, want, err)
		}
		select {
		case <-ctx.Done():
			return toolRun{}, fmt.Errorf("%d of %d records: %w", got, want, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := stopJVM(p); err != nil {
		return toolRun{}, err
	}
	if got != want {
		b.logf("debezium: WARNING: Debezium (%s producer) wrote %d records for %d", w.profile, got, want)
	}
	return newToolRun(want, got, doneAt.Sub(p.started), p), nil
}

// configure writes the worker's and the connector's properties (database settings from the
// scenario's URL, the REST API on a free port) and the worker's log configuration, and returns
// the files and the REST API's URL.
func (w *connectWorker) configure() (testsvc.ConnectFiles, string, error) {
	cfg, err := pgconn.ParseConfig(w.s.db.url)
	if err != nil {
		return testsvc.ConnectFiles{}, "", errors.New("parse PostgreSQL URL")
	}
	w.conn["database.hostname"] = cfg.Host
	w.conn["database.port"] = strconv.Itoa(int(cfg.Port))
	w.conn["database.user"] = cfg.User
	w.conn["database.password"] = cfg.Password
	w.conn["database.dbname"] = cfg.Database
	port, err := testsvc.FreePorts(1)
	if err != nil {
		return testsvc.ConnectFiles{}, "", err
	}
	rest := fmt.Sprintf("http://127.0.0.1:%d", port[0])
	w.worker["listeners"] = rest
	files, err := testsvc.WriteConnectFiles(w.dir, w.worker, w.conn)
	return files, rest, err
}

// startProcess starts cmd with its output in logPath, as a cdcProc (stop, check and usage work
// the same). It dies with the bench.
func startProcess(cmd *exec.Cmd, logPath string) (*cdcProc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &cdcProc{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// stopJVM stops a Java process with SIGTERM: the JVM runs its shutdown hooks (Connect stops
// its connector and commits its offsets) and exits with status 143, which is a clean stop.
func stopJVM(p *cdcProc) error {
	err := p.stop(2 * time.Minute)
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 143 {
		return nil
	}
	return err
}

// connectorFailed asks the worker's REST API for the connector's status and returns an error
// when the connector or a task has FAILED (nil while the worker is starting).
func connectorFailed(ctx context.Context, rest, name string) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := testsvc.GetConnectorStatus(rctx, rest, name)
	if err != nil {
		return nil
	}
	return st.Failed(name)
}

// debeziumJars returns the Kafka Connect worker's jar folder and Debezium's plugin path, running
// scripts/services.sh install-debezium (Maven Central, cached in $TIDEMARK_CACHE) when they are
// not there yet.
func debeziumJars(root string) (lib, plugins string, err error) {
	cache := testsvc.CacheDir()
	lib = filepath.Join(cache, "connect-4.1.1", "lib")
	plugins = filepath.Join(cache, "debezium-"+debeziumVersion)
	complete := func() bool {
		_, e1 := os.Stat(filepath.Join(lib, ".complete"))
		_, e2 := os.Stat(filepath.Join(plugins, ".complete"))
		_, e3 := os.Stat(filepath.Join(cache, "apicurio-converter-"+apicurioConverterVersion, ".complete"))
		return e1 == nil && e2 == nil && e3 == nil
	}
	if complete() {
		return lib, plugins, nil
	}
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "services.sh"), "install-debezium")
	cmd.Env = append(os.Environ(), "TIDEMARK_DEBEZIUM_VERSION="+debeziumVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("scripts/services.sh install-debezium: %w\n%s", err, testsvc.Tail(string(out), 20))
	}
	if !complete() {
		return "", "", fmt.Errorf("no Kafka Connect jars in %s, no Debezium plugin in %s or no Apicurio converter beside it after install-debezium", lib, plugins)
	}
	return lib, plugins, nil
}

// createTopics creates topics with one partition and the broker's replication factor, as
// Tidemark creates its own (CDC_TOPIC_PARTITIONS=1).
func (k *kafkaClient) createTopics(ctx context.Context, topics []string) error {
	resps, err := k.adm.CreateTopics(ctx, 1, -1, nil, topics...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return fmt.Errorf("create topics %v: %w", topics, err)
	}
	return nil
}
