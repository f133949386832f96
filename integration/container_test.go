package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/tidemark/cdc/internal/testenv"
)

// The container image (docs/container.md): `make image` builds it with buildah FROM scratch, and
// podman runs it on the host network against the test PostgreSQL and Kafka. This machine refuses
// crun and podman's default ulimits, hence the flags.
var podmanRunFlags = []string{"--runtime", "runc", "--ulimit", "nofile=20000:20000",
	"--ulimit", "nproc=32768:32768", "--network", "host"}

// TestContainer: the image built by `make image` runs cdc as uid 65532; cdc copies and streams a
// table (the topic equals the table), answers /healthz and /readyz and the compose file's health
// check; after SIGTERM it stops in order within CDC_SHUTDOWN_TIMEOUT; a second container resumes
// with nothing lost, nothing duplicated and no table copied again. docker-compose.yml loads in
// compose-go (the Compose Specification's reference loader, with schema validation), and its cdc
// service's environment, pointed at the test servers, passes `cdc check` inside the image.
func TestContainer(t *testing.T) {
	testenv.PGURL(t) // the servers first: skipped or failed like every integration test
	requireContainerTools(t)
	root := testenv.RepoRoot(t)
	compose := loadCompose(t, root)
	cdcService, ok := compose.Services["cdc"]
	if !ok {
		t.Fatalf("docker-compose.yml has no cdc service")
	}
	image := buildImage(t, root)

	t.Run("copy stream stop resume", func(t *testing.T) {
		testContainerRun(t, image, cdcService)
	})
	t.Run("compose environment passes cdc check", func(t *testing.T) {
		testComposeCheck(t, image, root, cdcService)
	})
}

func testContainerRun(t *testing.T, image string, svc types.ServiceConfig) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(
		`CREATE TABLE items (id int PRIMARY KEY, v text)`,
		`INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1, 1000) g`,
	)
	const shutdownTimeout = 10 * time.Second
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.items"
	vars["CDC_HTTP_ADDR"] = freeAddr(t) // 127.0.0.1: the container shares the host's network
	vars["CDC_SHUTDOWN_TIMEOUT"] = shutdownTimeout.String()

	c := runContainer(t, image, vars)
	e.waitFor(nil, 2*time.Minute, e.currentLSN(ctx), "public.items")

	// The process runs as the image's non-root user: read its ids from the host's /proc (root
	// podman maps no user namespace, so the host sees the container's ids).
	pid := strings.TrimSpace(podman(t, "inspect", "--format", "{{.State.Pid}}", c))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatalf("status of the container's process %s: %v", pid, err)
	}
	ids := 0
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") {
			ids++
			if slices.ContainsFunc(f[1:], func(id string) bool { return id != "65532" }) {
				t.Errorf("cdc runs with %s, want 65532 throughout", line)
			}
		}
	}
	if ids != 2 {
		t.Errorf("no Uid and Gid lines in /proc/%s/status:\n%s", pid, status)
	}

	base := "http://" + vars["CDC_HTTP_ADDR"]
	if code := httpStatus(base + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d, want 200", code)
	}
	waitHTTP(t, base+"/readyz", http.StatusOK)
	// The compose file's health check, run in the container as the engine would.
	if hc := svc.HealthCheck; hc == nil || len(hc.Test) < 2 || hc.Test[0] != "CMD" {
		t.Errorf("compose cdc health check %v, want [CMD /cdc health ...]", hc)
	} else if out, err := exec.Command("podman", append([]string{"exec", c}, hc.Test[1:]...)...).CombinedOutput(); err != nil {
		t.Errorf("compose health check %q in the container: %v\n%s", hc.Test[1:], err, out)
	}

	// Streaming while the first container runs.
	e.exec(
		`INSERT INTO items SELECT g, 'row ' || g FROM generate_series(1001, 1200) g`,
		`UPDATE items SET v = 'updated' WHERE id % 10 = 0`,
		`DELETE FROM items WHERE id % 7 = 0`,
	)
	e.waitFor(nil, 2*time.Minute, e.currentLSN(ctx), "public.items")
	assertSameState(t, "first run", materialize(t, e.readTopic(e.topic("public.items"))), e.tableState("items", "id"))

	// SIGTERM: an orderly stop (exit 0) within the shutdown bound, with a margin for podman.
	start := time.Now()
	podman(t, "kill", "--signal", "TERM", c)
	code := strings.TrimSpace(podman(t, "wait", c))
	took := time.Since(start)
	t.Logf("container stopped %s after SIGTERM with exit code %s (CDC_SHUTDOWN_TIMEOUT %s)", took.Round(time.Millisecond), code, shutdownTimeout)
	if code != "0" {
		t.Errorf("exit code after SIGTERM = %s, want 0", code)
	}
	if bound := shutdownTimeout + 10*time.Second; took > bound {
		t.Errorf("stopped %s after SIGTERM, want at most %s", took.Round(time.Millisecond), bound)
	}

	// Changes made while nothing runs arrive with the second container.
	e.exec(
		`INSERT INTO items SELECT g, 'while stopped ' || g FROM generate_series(1201, 1500) g`,
		`UPDATE items SET v = 'updated while stopped' WHERE id % 10 = 1`,
		`DELETE FROM items WHERE id % 11 = 0`,
	)
	runContainer(t, image, vars)
	e.waitFor(nil, 2*time.Minute, e.currentLSN(ctx), "public.items")
	recs := e.readTopic(e.topic("public.items"))
	assertSameState(t, "after the resume", materialize(t, recs), e.tableState("items", "id"))
	checkOrder(t, recs)
	snapshot, dups := 0, 0
	seen := map[string]bool{}
	for _, r := range recs {
		env := decode(t, r)
		if env == nil {
			continue
		}
		if env.Op == "r" {
			snapshot++
		}
		id := fmt.Sprintf("%s/%d/%d/%s", r.Key, env.Source.LSN, env.Source.Sequence, env.Op)
		if seen[id] && env.Op != "r" {
			dups++
		}
		seen[id] = true
	}
	if snapshot != 1000 {
		t.Errorf("%d snapshot records, want 1000: the table was copied again", snapshot)
	}
	if dups > 0 {
		t.Errorf("%d change records published twice across the restart", dups)
	}
}

func testComposeCheck(t *testing.T, image, root string, svc types.ServiceConfig) {
	e := newEnv(t)
	schema, err := os.ReadFile(filepath.Join(root, "scripts", "demo-schema.sql"))
	if err != nil {
		t.Fatal(err)
	}
	e.exec(string(schema))

	// The compose environment with its service names pointed at the test servers: the postgres
	// service becomes the test's own database, kafka the test brokers. Everything else is as the
	// file says.
	vars := map[string]string{}
	for k, v := range svc.Environment {
		if v != nil {
			vars[k] = *v
		}
	}
	pg, err := url.Parse(vars["CDC_PG_URL"])
	if err != nil {
		t.Fatalf("compose CDC_PG_URL: %v", err)
	}
	if pg.Host != "postgres:5432" {
		t.Fatalf("compose CDC_PG_URL %q: want a URL of the postgres service (postgres:5432)", pg.Redacted())
	}
	test, err := url.Parse(e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	pg.Host, pg.Path = test.Host, test.Path
	vars["CDC_PG_URL"] = pg.String()
	if vars["CDC_KAFKA_BROKERS"] != "kafka:9092" {
		t.Fatalf("compose CDC_KAFKA_BROKERS %q: want the kafka service (kafka:9092)", vars["CDC_KAFKA_BROKERS"])
	}
	vars["CDC_KAFKA_BROKERS"] = strings.Join(e.brokers, ",")

	args := append([]string{"run", "--rm"}, podmanRunFlags...)
	for _, k := range sortedKeys(vars) {
		args = append(args, "--env", k+"="+vars[k])
	}
	out, err := exec.Command("podman", append(args, image, "check")...).CombinedOutput()
	t.Logf("cdc check in the image with the compose environment:\n%s", out)
	if err != nil || bytes.Contains(out, []byte("✗")) {
		t.Errorf("cdc check: %v", err)
	}
	assertContains(t, string(out), "✓ wal_level = logical", "✓ table public.demo_orders: SELECT granted",
		"topic creation allowed", "transactions available")
	e.assertClean()
}

// requireContainerTools skips the test when buildah, podman or runc is missing or podman cannot
// run here, and fails it instead in CI (CI=true or CDC_TEST_REQUIRE=1), where .ci/run installs
// them.
func requireContainerTools(t *testing.T) {
	t.Helper()
	var problems []string
	for _, tool := range []string{"buildah", "podman", "runc"} {
		if _, err := exec.LookPath(tool); err != nil {
			problems = append(problems, tool+" is not installed")
		}
	}
	if len(problems) == 0 {
		if out, err := exec.Command("podman", "info", "--format", "{{.Store.GraphDriverName}}").CombinedOutput(); err != nil {
			problems = append(problems, fmt.Sprintf("podman info: %v: %s", err, bytes.TrimSpace(out)))
		}
	}
	if len(problems) == 0 {
		return
	}
	msg := "container test: " + strings.Join(problems, "; ") + " (Debian: apt-get install buildah podman runc; .ci/run installs them)"
	if containersRequired() {
		t.Fatal(msg)
	}
	t.Skip(msg + "; set CI=true or " + testenv.EnvRequire + "=1 to fail instead")
}

func containersRequired() bool {
	for _, name := range []string{"CI", testenv.EnvRequire} {
		if v, err := strconv.ParseBool(os.Getenv(name)); err == nil && v {
			return true
		}
	}
	return false
}

// loadCompose loads docker-compose.yml with compose-go: schema validation, interpolation and
// consistency checks, as `docker compose config` does.
func loadCompose(t *testing.T, root string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithConsistency(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

// buildImage runs `make image` under a tag of the test's own and removes the image at cleanup.
func buildImage(t *testing.T, root string) string {
	t.Helper()
	tag := fmt.Sprintf("localhost/tidemark/cdc-it:%d", time.Now().UnixNano())
	cmd := exec.Command("make", "image", "IMAGE="+tag)
	cmd.Dir = root
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make image: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("podman", "rmi", "--force", tag).CombinedOutput(); err != nil {
			t.Errorf("remove image %s: %v: %s", tag, err, out)
		}
	})
	size := strings.TrimSpace(podman(t, "image", "inspect", "--format", "{{.Size}}", tag))
	user := strings.TrimSpace(podman(t, "image", "inspect", "--format", "{{.Config.User}}", tag))
	t.Logf("make image built %s in %s: %s bytes, user %s", tag, time.Since(start).Round(100*time.Millisecond), size, user)
	if user != "65532:65532" {
		t.Errorf("image user %q, want 65532:65532", user)
	}
	checkImageFiles(t, tag)
	return tag
}

// checkImageFiles reads the image's file system (podman export of a container never started)
// and checks what cdc needs on an empty base: itself, the user, CA certificates, a writable /tmp.
func checkImageFiles(t *testing.T, image string) {
	t.Helper()
	c := strings.TrimSpace(podman(t, "create", image))
	defer podman(t, "rm", c)
	cmd := exec.Command("podman", "export", c)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	var passwd []byte
	tr := tar.NewReader(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("podman export: %v", err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		files[name] = h
		if name == "etc/passwd" {
			passwd, _ = io.ReadAll(tr)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("podman export: %v", err)
	}
	want := []struct {
		path string
		ok   func(h *tar.Header) bool
		what string
	}{
		{"cdc", func(h *tar.Header) bool { return h.Typeflag == tar.TypeReg && h.Mode&0o111 != 0 }, "an executable"},
		{"etc/ssl/certs/ca-certificates.crt", func(h *tar.Header) bool { return h.Size > 0 }, "a CA bundle"},
		{"etc/group", func(h *tar.Header) bool { return h.Size > 0 }, "a file"},
		{"tmp", func(h *tar.Header) bool { return h.Typeflag == tar.TypeDir && h.Mode&0o7777 == 0o1777 }, "a directory with mode 1777"},
		{"home/nonroot", func(h *tar.Header) bool { return h.Typeflag == tar.TypeDir && h.Uid == 65532 }, "a directory owned by 65532"},
	}
	for _, w := range want {
		if h, ok := files[w.path]; !ok || !w.ok(h) {
			t.Errorf("image /%s: want %s (%+v)", w.path, w.what, h)
		}
	}
	if !bytes.Contains(passwd, []byte("\nnonroot:x:65532:65532:")) {
		t.Errorf("image /etc/passwd has no nonroot user 65532:\n%s", passwd)
	}
}

// runContainer starts the image detached with vars and removes the container at cleanup,
// logging its output when the test failed.
func runContainer(t *testing.T, image string, vars map[string]string) string {
	t.Helper()
	name := fmt.Sprintf("tidemark-it-%d", time.Now().UnixNano())
	args := append([]string{"run", "--detach", "--name", name}, podmanRunFlags...)
	for _, k := range sortedKeys(vars) {
		args = append(args, "--env", k+"="+vars[k])
	}
	podman(t, append(args, image)...)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := exec.Command("podman", "logs", name).CombinedOutput()
			t.Logf("container %s log:\n%s", name, tail(string(out), 12000))
		}
		if out, err := exec.Command("podman", "rm", "--force", "--time", "0", name).CombinedOutput(); err != nil {
			t.Errorf("remove container %s: %v: %s", name, err, out)
		}
	})
	return name
}

// podman runs a podman command and returns its standard output; a failure fails the test.
func podman(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "podman", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("podman %s: %v: %s", args[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.String()
}

func httpStatus(u string) int {
	resp, err := http.Get(u)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitHTTP(t *testing.T, u string, want int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		code := httpStatus(u)
		if code == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d, want %d", u, code, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
