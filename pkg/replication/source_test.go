package replication

import (
	"errors"
	"strings"
	"testing"

	"github.com/tidemark/cdc/pkg/pgcat"
)

// TestStandbyVersionGate: a standby before PostgreSQL 16 cannot decode; cdc stops with a
// message that says so (a setup error, not retried). 16 and later pass.
func TestStandbyVersionGate(t *testing.T) {
	tests := []struct {
		version string
		refused bool
	}{
		{"15.14 (Debian 15.14-0+deb12u1)", true},
		{"14.2", true},
		{"16.0", false},
		{"17.6 (Debian 17.6-0+deb13u1)", false},
		{"18beta1", false},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			err := standbyVersion(tt.version)
			if (err != nil) != tt.refused {
				t.Fatalf("standbyVersion(%q) = %v, want refused=%v", tt.version, err, tt.refused)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, pgcat.ErrSetup) {
				t.Errorf("error %v is not a fatal setup error", err)
			}
			for _, want := range []string{"CDC_PG_URL names a hot standby (PostgreSQL " + tt.version, "logical decoding on a standby needs PostgreSQL 16 or later"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
		})
	}
}
