package integration

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReadyWhileTablesWait: while published tables cannot be taken in (here the existing topic
// of a keyless table is compacted, which Kafka would refuse its null keys on), /readyz answers
// 503 and says why, and 200 once the operator fixed the topic and the table is copied. On
// c9cb695 /readyz said {"ready":true} while 3,000 tables waited for topics for 8 minutes.
func TestReadyWhileTablesWait(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	e.exec(`CREATE TABLE ok1 (id int PRIMARY KEY, v text)`, `CREATE TABLE nokey (v text)`,
		`ALTER TABLE nokey REPLICA IDENTITY FULL`,
		`INSERT INTO ok1 VALUES (1, 'a')`, `INSERT INTO nokey VALUES ('x')`)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := e.topic("public.nokey")
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": new("compact")}, topic); err != nil {
		t.Fatal(err)
	}
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.ok1,public.nokey"
	vars["CDC_HTTP_ADDR"] = freeAddr(t)
	p := e.startCDC(vars)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + vars["CDC_HTTP_ADDR"] + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	wait := func(want int, contains string) string {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			code, body := get("/readyz")
			if code == want && strings.Contains(body, contains) {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz: %d %s; want %d with %q\n%s", code, body, want, contains, tail(p.log.String(), 3000))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	body := wait(http.StatusServiceUnavailable, "compacted but its table has no key")
	t.Logf("/readyz while the table waits: %s", strings.TrimSpace(body))
	// Seconds later it still is not ready: nothing moved.
	time.Sleep(3 * time.Second)
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz turned %d while the table still waits: %s", code, body)
	}
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: new("delete")}}, topic); err != nil {
		t.Fatal(err)
	}
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.ok1", "public.nokey")
	wait(http.StatusOK, `"ready":true`)
}
