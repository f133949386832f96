package main

import (
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/internal/posture"
)

// targetPosture says how the connection to the target PostgreSQL is protected (posture.PG,
// shared with cdc). A target reached only through a Unix socket or a loopback address sends
// nothing across the network: plaintext or an unverified certificate there puts nothing at risk,
// so it is said without a warning, and APPLY_REQUIRE_TLS accepts it.
func targetPosture(cfg *pgconn.Config) posture.Posture {
	p := posture.PG(cfg, "target PostgreSQL", "APPLY_TARGET_URL")
	if p.Warning != "" && posture.Loopback(cfg) {
		p.Summary += "; loopback only, nothing crosses the network"
		p.Warning, p.Fix = "", ""
	}
	return p
}
