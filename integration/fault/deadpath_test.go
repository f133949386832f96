package fault

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testenv"
	"github.com/tidemark/cdc/internal/testsvc"
)

// TestKafkaDeadPath is Kafka's dead path: a broker that accepts connections and never answers,
// as a hung broker or a path that died behind a middlebox looks to a client. The broker is one
// node (testenv.StartCluster with one node) that advertises a proxy's port to clients; the
// test's own clients reach it directly. First cdc starts while the proxy swallows everything:
// how long until it says so, and what it says. Then cdc runs under a workload and the proxy turns
// into a blackhole for 90 s (cdc's open connections stall, new ones are accepted and never
// answered): when cdc first warns, when /readyz says why it waits, how long after the heal
// changes flow again, and nothing lost or published twice. franz-go's timeouts are as Tidemark
// configures them (only the dial timeout, CDC_CONNECT_TIMEOUT, is set; requests are bounded by
// franz-go's own request timeout overhead of 10 s beyond each request's timeout).
func TestKafkaDeadPath(t *testing.T) {
	s := seed(t)
	proxy, err := NewProxy("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	srv := testenv.StartPrivate(t, testenv.PrivateOptions{})
	srv.KillKafka() // only PostgreSQL is needed
	c := testenv.StartCluster(t, testenv.ClusterOptions{Nodes: 1, AdvertisedPorts: map[int32]int{1: proxy.Port()}})
	proxy.SetTarget(c.Nodes[0].Addr())
	db := srv.NewDB(t)
	pub := "fault_pub"
	createTables(t, db, pub, 5000, 100)

	t.Run("start", func(t *testing.T) { deadPathAtStart(t, proxy, db, pub) })
	t.Run("running", func(t *testing.T) {
		r := startClusterRun(t, c, []string{proxy.Addr()}, db, pub, s, 5000, 100)
		r.settle(r.cutOff(proxy, c.Nodes[0].ID, 90*time.Second))
		r.finish("kafka-dead-path")
	})
}

// deadPathAtStart starts cdc against a broker that swallows everything and reports when it
// first warned, whether and when it exited, and what it said.
func deadPathAtStart(t *testing.T, proxy *Proxy, db, pub string) {
	const limit = 90 * time.Second
	proxy.Blackhole()
	defer proxy.Heal()
	id := testsvc.RandomHex(4)
	vars := map[string]string{
		"CDC_PG_URL":        db,
		"CDC_KAFKA_BROKERS": proxy.Addr(),
		"CDC_PUBLICATION":   pub,
		"CDC_SLOT":          "dead_" + id,
		"CDC_TOPIC_PREFIX":  "dead" + id,
		"CDC_LOG_FORMAT":    "text",
		"CDC_LOG_LEVEL":     "info",
	}
	cmd := exec.Command(cdcBinary)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TMPDIR=" + t.TempDir()}
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	log := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	at := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := "did not exit within " + limit.String() + " (killed)"
	select {
	case err := <-done:
		exited = fmt.Sprintf("exited %s after the start (%v)", time.Since(at).Round(100*time.Millisecond), err)
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
	}
	noticed := "never"
	if w, line, ok := firstWarning(log.String()); ok {
		noticed = fmt.Sprintf("%s after the start: %s", w.Sub(at).Round(100*time.Millisecond), line)
	}
	line := fmt.Sprintf("kafka-dead-path fault [cdc started against a broker that accepts and never answers]: first warning %s; cdc %s; %d connections swallowed; cdc logged: %s",
		noticed, exited, proxy.Holes(), warnings(log.String()))
	t.Log(line)
	fmt.Fprintln(os.Stderr, line)
	if noticed == "never" {
		t.Errorf("cdc said nothing within %s of starting against a broker that never answers; log:\n%s", limit, testsvc.Tail(log.String(), 40))
	}
	if strings.Contains(exited, "did not exit") {
		t.Logf("cdc log (tail):\n%s", testsvc.Tail(log.String(), 30))
	}
}
