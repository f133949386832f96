package pgcat

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrOneHost means a connection string names one host, so no other server (a standby) can be
// reached through it.
var ErrOneHost = errors.New("the connection string names one host")

// ConnectStandby is Connect to the first of url's hosts that is a hot standby (in recovery),
// for reading what a standby holds (the synchronised copy of a failover slot). A url with one
// host fails with ErrOneHost: that host is the primary.
func ConnectStandby(ctx context.Context, url string, t Timeouts) (*Conn, error) {
	cfg, err := ParseConfig(url, t)
	if err != nil {
		return nil, err
	}
	if len(cfg.Fallbacks) == 0 {
		return nil, ErrOneHost
	}
	cfg.RuntimeParams["application_name"] = "tidemark"
	cfg.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsStandby
	conn, err := Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Conn{conn: conn}, nil
}
