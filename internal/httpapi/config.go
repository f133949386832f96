package httpapi

import (
	"time"

	"github.com/tidemark/cdc/pkg/secret"
)

// Config is the HTTP endpoints' configuration apart from their address. The zero value serves
// them without admin endpoints and without pprof.
type Config struct {
	// Token guards the admin endpoints; unset, they are off.
	Token secret.Token
	// Pprof serves /debug/pprof/ (behind Token).
	Pprof bool
	// IdleTimeout closes an idle keep-alive connection.
	IdleTimeout time.Duration
	// WriteTimeout bounds writing an answer (0: httpWriteTimeout); tests shorten it.
	WriteTimeout time.Duration
}
