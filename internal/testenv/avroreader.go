package testenv

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testsvc"
)

// AvroReaderLib returns the folder of the jars of the plain Java consumer
// scripts/avro-reader/TidemarkAvroReader.java (Apicurio Registry's Avro deserializer,
// kafka-clients), running `scripts/services.sh install-avro-reader` (Maven Central, cached in
// $TIDEMARK_CACHE/avro-reader-<version>/lib) when they are not there yet.
func AvroReaderLib(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: integration test skipped in -short mode")
	}
	find := func() string {
		matches, _ := filepath.Glob(filepath.Join(testsvc.CacheDir(), "avro-reader-*", "lib", ".complete"))
		if len(matches) == 0 {
			return ""
		}
		return filepath.Dir(matches[len(matches)-1])
	}
	if lib := find(); lib != "" {
		return lib
	}
	if out, err := runServices(t, "install-avro-reader"); err != nil {
		t.Fatalf("testenv: install the Avro reader's jars: %v\n%s", err, testsvc.Tail(out, 3000))
	}
	lib := find()
	if lib == "" {
		t.Fatalf("testenv: no Avro reader jars under %s after install-avro-reader", testsvc.CacheDir())
	}
	return lib
}

// ReadAvroWithJava runs TidemarkAvroReader (a KafkaConsumer with Apicurio Registry's
// AvroKafkaDeserializer, read_committed) on topic from its beginning to its end offsets, with
// the Java of 21 or later that runs the registry, and returns its output: one JSON line per
// record. registryURL is the Confluent-compatible API's base URL (Registry's); the deserializer
// reads schemas through the registry's own v2 API beside it.
func ReadAvroWithJava(t testing.TB, brokers []string, topic, registryURL string) []byte {
	t.Helper()
	lib := AvroReaderLib(t)
	out, err := runServices(t, "java21")
	if err != nil {
		t.Fatalf("testenv: a Java of 21 or later: %v\n%s", err, out)
	}
	java := filepath.Join(strings.TrimSpace(out), "bin", "java")
	root, err := testsvc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	v2 := strings.TrimSuffix(strings.TrimRight(registryURL, "/"), testsvc.RegistryAPI) + "/apis/registry/v2"
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "--enable-native-access=ALL-UNNAMED",
		"-cp", filepath.Join(lib, "*"), filepath.Join(root, "scripts", "avro-reader", "TidemarkAvroReader.java"),
		strings.Join(brokers, ","), topic, v2, "180")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("testenv: TidemarkAvroReader: %v\n%s", err, testsvc.Tail(stderr.String(), 6000))
	}
	t.Logf("TidemarkAvroReader: %s", strings.TrimSpace(testsvc.Tail(stderr.String(), 300)))
	return stdout.Bytes()
}

// runServices runs scripts/services.sh with args and returns its standard output, or its standard
// error beside the error.
func runServices(t testing.TB, args ...string) (string, error) {
	t.Helper()
	root, err := testsvc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "scripts", "services.sh"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stderr.String(), err
	}
	return stdout.String(), nil
}
