package pgcat

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestWatch(t *testing.T) {
	tests := []struct {
		name string
		// run reads from the watched end of a pipe whose other end is peer.
		run        func(t *testing.T, c net.Conn, peer net.Conn) error
		wantSilent bool
		wantErr    error
	}{
		{
			name: "silence past the bound",
			run: func(t *testing.T, c, _ net.Conn) error {
				_, err := c.Read(make([]byte, 1))
				return err
			},
			wantSilent: true,
		},
		{
			name: "data before the bound",
			run: func(t *testing.T, c, peer net.Conn) error {
				go func() { time.Sleep(20 * time.Millisecond); _, _ = peer.Write([]byte("x")) }()
				_, err := c.Read(make([]byte, 1))
				return err
			},
		},
		{
			name: "an earlier deadline of the user wins",
			run: func(t *testing.T, c, _ net.Conn) error {
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
				_, err := c.Read(make([]byte, 1))
				return err
			},
			wantErr: os.ErrDeadlineExceeded,
		},
		{
			name: "a deadline set during the read interrupts it",
			run: func(t *testing.T, c, _ net.Conn) error {
				go func() { time.Sleep(10 * time.Millisecond); _ = c.SetDeadline(time.Unix(1, 0)) }()
				_, err := c.Read(make([]byte, 1))
				return err
			},
			wantErr: os.ErrDeadlineExceeded,
		},
		{
			name: "a later deadline of the user does not lift the bound",
			run: func(t *testing.T, c, _ net.Conn) error {
				_ = c.SetReadDeadline(time.Now().Add(time.Hour))
				_, err := c.Read(make([]byte, 1))
				return err
			},
			wantSilent: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			c := Watch(a, 100*time.Millisecond)
			start := time.Now()
			err := tt.run(t, c, b)
			took := time.Since(start)
			if got := errors.Is(err, ErrSilent); got != tt.wantSilent {
				t.Fatalf("err = %v: ErrSilent %v, want %v", err, got, tt.wantSilent)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !tt.wantSilent && tt.wantErr == nil && err != nil {
				t.Fatalf("err = %v, want nil", err)
			}
			if tt.wantSilent {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Errorf("err = %v: not a net.Error timeout", err)
				}
				if took < 100*time.Millisecond {
					t.Errorf("silent after %s, before the 100ms bound", took)
				}
			}
		})
	}
}

func TestApply(t *testing.T) {
	tests := []struct {
		name        string
		conn        string
		t           Timeouts
		wantConnect time.Duration
		wantWrapped bool
	}{
		{"defaults", "postgres://u@h/db", Timeouts{}, DefaultConnect, false},
		{"configured", "postgres://u@h/db", Timeouts{Connect: 3 * time.Second, Receive: time.Second}, 3 * time.Second, true},
		{"connect_timeout in the URL wins", "postgres://u@h/db?connect_timeout=7", Timeouts{Connect: 3 * time.Second}, 7 * time.Second, false},
		{"connect only", "postgres://u@h/db", Timeouts{Connect: 2 * time.Second, Receive: time.Second}.ConnectOnly(), 2 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := pgconn.ParseConfig(tt.conn)
			if err != nil {
				t.Fatal(err)
			}
			var dialed net.Conn
			inner, peer := net.Pipe()
			defer inner.Close()
			defer peer.Close()
			cfg.DialFunc = func(context.Context, string, string) (net.Conn, error) { return inner, nil }
			tt.t.Apply(cfg)
			if cfg.ConnectTimeout != tt.wantConnect {
				t.Errorf("ConnectTimeout = %s, want %s", cfg.ConnectTimeout, tt.wantConnect)
			}
			dialed, err = cfg.DialFunc(t.Context(), "tcp", "h:5432")
			if err != nil {
				t.Fatal(err)
			}
			_, wrapped := dialed.(*watchedConn)
			if wrapped != tt.wantWrapped {
				t.Errorf("dialed conn wrapped = %v, want %v", wrapped, tt.wantWrapped)
			}
		})
	}
}
