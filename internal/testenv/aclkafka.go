package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tidemark/cdc/internal/testsvc"
)

// ACLKafka is a Kafka broker of one test that authorizes every request, as a least-privilege
// deployment does: the standard authorizer, allow.everyone.if.no.acl.found=false, and one
// super user, Admin, who is also the principal of the broker's own inter-broker and controller
// connections. Every other user may do only what an ACL grants; the broker starts with none.
//
// Clients connect to Brokers with SASL_PLAINTEXT and SCRAM-SHA-512. The broker talks to its
// controller over SASL PLAIN as Admin, so no listener leaves a principal unauthenticated
// (ANONYMOUS).
//
// The broker logs every refusal (kafka.authorizer.logger) to Dir/kafka.log; Refusals reads them.
type ACLKafka struct {
	Dir     string
	Brokers string // host:port of the SASL_PLAINTEXT listener
	// Admin is the super user; CDC and Applier are ordinary users, granted nothing at start.
	Admin, CDC, Applier KafkaUser
}

// KafkaUser is a SCRAM-SHA-512 user of an ACLKafka.
type KafkaUser struct{ Name, Password string }

// Opts are the franz-go options that authenticate as u.
func (u KafkaUser) Opts() []kgo.Opt {
	return []kgo.Opt{kgo.SASL(scram.Auth{User: u.Name, Pass: u.Password}.AsSha512Mechanism())}
}

// Env are cdc's (and tidemark-apply's) variables that authenticate as u.
func (u KafkaUser) Env() map[string]string {
	return map[string]string{"CDC_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
		"CDC_KAFKA_SASL_USERNAME": u.Name, "CDC_KAFKA_SASL_PASSWORD": u.Password}
}

// Client returns a client of the broker authenticated as u, closed at cleanup.
func (k *ACLKafka) Client(t testing.TB, u KafkaUser, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers)}, u.Opts()...), opts...)...)
	if err != nil {
		t.Fatalf("testenv: kafka client as %s: %v", u.Name, err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// AdminClient returns an admin client authenticated as the super user, closed at cleanup.
func (k *ACLKafka) AdminClient(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(k.Client(t, k.Admin))
}

// StartACLKafka starts the broker and stops it at cleanup. It fails the test when the broker
// cannot start (the Kafka jars come from `scripts/services.sh install`).
func StartACLKafka(t testing.TB) *ACLKafka {
	t.Helper()
	if testing.Short() {
		t.Skip("testenv: integration test skipped in -short mode")
	}
	root, err := testsvc.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	lib, err := kafkaLib(root)
	if err != nil {
		t.Fatalf("testenv: Kafka jars: %v", err)
	}
	ports, err := testsvc.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	k := &ACLKafka{
		Dir:     t.TempDir(),
		Brokers: fmt.Sprintf("127.0.0.1:%d", ports[0]),
		Admin:   KafkaUser{"admin", "admin-" + testsvc.RandomHex(8)},
		CDC:     KafkaUser{"cdc", "cdc-" + testsvc.RandomHex(8)},
		Applier: KafkaUser{"applier", "applier-" + testsvc.RandomHex(8)},
	}
	singleNode, err := readSingleNode(root)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	// The PLAIN login module's JAAS line serves both ends: username and password are what the
	// broker sends as a client (to itself, to the controller), user_<name> what it accepts.
	plain := fmt.Sprintf(`org.apache.kafka.common.security.plain.PlainLoginModule required username="%[1]s" password="%[2]s" user_%[1]s="%[2]s";`,
		k.Admin.Name, k.Admin.Password)
	props := fmt.Sprintf(`process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:%[2]d
listeners=CLIENT://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d
advertised.listeners=CLIENT://127.0.0.1:%[1]d
listener.security.protocol.map=CLIENT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT
inter.broker.listener.name=CLIENT
controller.listener.names=CONTROLLER
sasl.mechanism.inter.broker.protocol=PLAIN
sasl.mechanism.controller.protocol=PLAIN
listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.client.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.client.plain.sasl.jaas.config=%[3]s
listener.name.controller.plain.sasl.jaas.config=%[3]s
log.dirs=%[4]s
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:%[5]s
`, ports[0], ports[1], plain, filepath.Join(k.Dir, "data"), k.Admin.Name) + singleNode
	var scramUsers []string
	for _, u := range []KafkaUser{k.Admin, k.CDC, k.Applier} {
		scramUsers = append(scramUsers, fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", u.Name, u.Password))
	}
	runKafka(t, lib, k.Dir, props, "dGlkZW1hcmstYWNsczAwMQ", scramUsers...)
	return k
}

// Refusals returns the authorizer's log lines that deny user something, so far.
func (k *ACLKafka) Refusals(t testing.TB, user string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k.Dir, "kafka.log"))
	if err != nil {
		t.Fatalf("testenv: broker log: %v", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "Principal = User:"+user+" is Denied") {
			out = append(out, line)
		}
	}
	return out
}
