package main

import (
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/internal/posture"
	"github.com/tidemark/cdc/pkg/kafkaconn"
)

// tlsPosture says how one connection is protected (internal/posture, shared with
// tidemark-apply): logged at start, printed by `cdc check`, and with CDC_REQUIRE_TLS=true an
// error when it has a Warning or is Required.
type tlsPosture = posture.Posture

// pgPosture classifies CDC_PG_URL's parsed configuration (posture.PG).
func pgPosture(cfg *pgconn.Config) tlsPosture { return posture.PG(cfg, "PostgreSQL", "CDC_PG_URL") }

// primaryPosture is pgPosture for CDC_PG_PRIMARY_URL, the connection to a standby's primary.
func primaryPosture(cfg *pgconn.Config) tlsPosture {
	p := posture.PG(cfg, "PostgreSQL", "CDC_PG_PRIMARY_URL")
	p.Conn = "PostgreSQL primary"
	p.Summary = strings.Replace(p.Summary, "PostgreSQL:", "PostgreSQL primary (CDC_PG_PRIMARY_URL):", 1)
	return p
}

// kafkaPosture classifies the Kafka security settings (posture.Kafka).
func kafkaPosture(s kafkaconn.Security) tlsPosture { return posture.Kafka(s) }

// tlsPostures classifies both connections (PostgreSQL only when its configuration parsed) and,
// with CDC_REQUIRE_TLS=true, reports every one that is not encrypted and verified as a problem.
func (c *checker) tlsPostures(requireTLS string, pg, primary *pgconn.Config, kafka kafkaconn.Security) []tlsPosture {
	require := c.boolean("CDC_REQUIRE_TLS", requireTLS)
	var out []tlsPosture
	if pg != nil {
		out = append(out, pgPosture(pg))
	}
	if primary != nil {
		out = append(out, primaryPosture(primary))
	}
	out = append(out, kafkaPosture(kafka))
	if !require {
		return out
	}
	for _, p := range out {
		if why := posture.Refused(p, "CDC_REQUIRE_TLS"); why != "" {
			c.add(p.Var, "", "%s", why)
		}
	}
	return out
}

// logPostures logs each connection's posture at start: a warning, with the fix, for each that
// is not encrypted and verified.
func logPostures(log *slog.Logger, postures []tlsPosture) { posture.Log(log, postures) }
