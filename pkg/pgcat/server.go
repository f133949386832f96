package pgcat

import (
	"context"
	"strconv"

	"github.com/tidemark/cdc/pkg/change"
)

// ServerMajor is the major version of a server_version parameter ("15.4", "14beta1"); 0 when it
// does not parse.
func ServerMajor(version string) int {
	end := 0
	for end < len(version) && version[end] >= '0' && version[end] <= '9' {
		end++
	}
	major, _ := strconv.Atoi(version[:end])
	return major
}

// serverMajor is the major version of the server q is connected to.
func serverMajor(q Querier) int { return ServerMajor(q.PgConn().ParameterStatus("server_version")) }

// CurrentWAL is the server's current WAL insert position; on a standby, the last position it
// replayed (WALPositionSQL).
func CurrentWAL(ctx context.Context, q Querier) (change.LSN, error) {
	var s string
	if err := q.QueryRow(ctx, `SELECT (`+WALPositionSQL+`)::text`).Scan(&s); err != nil {
		return 0, err
	}
	return change.ParseLSN(s)
}
