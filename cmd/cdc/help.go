package main

import (
	"fmt"
	"io"

	"github.com/tidemark/cdc/internal/envdoc"
)

const usage = `Usage: cdc [run|check [--wait-failover-ready[=10m]]|help|watermarks|resnapshot schema.table|health [ready]|version]

Tidemark streams every row change of a PostgreSQL publication to Kafka, one topic per table,
with per-table watermark records.

Commands:
  run         stream changes (the default)
  check       check PostgreSQL and Kafka for everything Tidemark needs, one line each with
              the fix for what is missing; exit 0 only when all holds; changes nothing
              --wait-failover-ready[=DURATION]: first wait (10m by default) until the
              standby's copy of a failover slot is failover-ready (synced, not temporary,
              not invalidated), the moment a promotion keeps it
  watermarks  print the latest watermark record of every table
  resnapshot schema.table
              copy one table again while the service runs, e.g. after a consumer lost its
              state (asks the running service, at the address of CDC_HTTP_ADDR); it answers
              once the request is durable in Kafka and survives a crash of the service
  health [ready]
              exit 0 if the running service is alive (or, with ready, streaming with no
              failed table); the container's health check
  help        print this text
  version     print the version

Configuration is read from environment variables only:
`

const pgNote = `libpq's PG* variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE,
PGSERVICE, ...) are honoured: they fill in whatever CDC_PG_URL leaves out, and without CDC_PG_URL
they describe the connection alone. Unknown CDC_* variables are an error.
`

// writeHelp writes the text of `cdc help`: usage, then every variable with its default and
// meaning in an aligned table.
func writeHelp(w io.Writer) {
	fmt.Fprint(w, usage)
	fmt.Fprintln(w)
	envdoc.WriteTable(w, envdoc.Vars[Env]())
	fmt.Fprintln(w)
	fmt.Fprint(w, pgNote)
}

// helpMarkdown is the variable table of writeHelp in Markdown, as docs/configuration.md shows it.
func helpMarkdown() string { return envdoc.Markdown(envdoc.Vars[Env]()) }
