package consumer

import (
	"strings"
	"testing"
)

// TestSecurityOpts: no variables give no options; cdc's checks apply (every problem at once),
// and a password never appears in the error.
func TestSecurityOpts(t *testing.T) {
	opts, err := SecurityOpts(func(string) string { return "" })
	if err != nil || len(opts) != 0 {
		t.Fatalf("empty environment: %d options, %v", len(opts), err)
	}
	env := map[string]string{"CDC_KAFKA_TLS": "maybe", "CDC_KAFKA_SASL_MECHANISM": "rot13", "CDC_KAFKA_SASL_PASSWORD": "s3cret-pw"}
	_, err = SecurityOpts(func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("invalid variables accepted")
	}
	if msg := err.Error(); !strings.Contains(msg, "CDC_KAFKA_TLS") || !strings.Contains(msg, "CDC_KAFKA_SASL_MECHANISM") || strings.Contains(msg, "s3cret-pw") {
		t.Fatalf("error %q: want both variables named and no password", msg)
	}
	env = map[string]string{"CDC_KAFKA_SASL_MECHANISM": "PLAIN", "CDC_KAFKA_SASL_USERNAME": "u", "CDC_KAFKA_SASL_PASSWORD": "p"}
	if opts, err := SecurityOpts(func(k string) string { return env[k] }); err != nil || len(opts) == 0 {
		t.Fatalf("SASL PLAIN: %d options, %v", len(opts), err)
	}
}
