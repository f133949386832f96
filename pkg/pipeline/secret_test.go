package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/secret/secrettest"
)

// TestConnectErrorsHidePassword feeds connection strings holding a known password to the
// pipeline's connect paths, against a closed local port or failing to parse, and checks that no
// error text shows it.
func TestConnectErrorsHidePassword(t *testing.T) {
	addr := secrettest.ClosedAddr(t)
	for _, tc := range secrettest.ConnStrings(addr) {
		t.Run(tc.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			conn, err := connect(ctx, tc.ConnString, pgcat.Timeouts{})
			if err == nil {
				conn.Close(ctx)
				t.Fatal("connect succeeded, want an error")
			}
			secrettest.Check(t, "connect error", err.Error())
			if err := replication.CreateSlot(ctx, tc.ConnString, "tidemark", false, pgcat.Timeouts{}); err == nil {
				t.Fatal("createSlot succeeded, want an error")
			} else {
				secrettest.Check(t, "createSlot error", err.Error())
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}
