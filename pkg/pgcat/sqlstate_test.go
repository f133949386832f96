package pgcat

import "testing"

func TestTransientSQLState(t *testing.T) {
	for code, want := range map[string]bool{
		"57P01": true,  // admin_shutdown
		"57P02": true,  // crash_shutdown
		"57P03": true,  // cannot_connect_now
		"08006": true,  // connection_failure
		"57P04": false, // database_dropped: retrying cannot bring it back
		"57014": false, // query_canceled
		"28P01": false, // invalid_password
		"42501": false, // insufficient_privilege
	} {
		if got := TransientSQLState(code); got != want {
			t.Errorf("TransientSQLState(%s) = %v, want %v", code, got, want)
		}
	}
}
