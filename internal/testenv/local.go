package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/tidemark/cdc/internal/testsvc"
)

// localAttempts is how often fromLocal retries with new ports: a port picked as free can be
// taken by someone else before the server binds it.
const localAttempts = 2

// fromLocal starts PostgreSQL and Kafka from local binaries with scripts/services.sh, in a
// private state folder, on free ports.
func fromLocal(ctx context.Context) (*services, error) {
	version, err := wantPGVersion(os.Getenv)
	if err != nil {
		return nil, err
	}
	var errs []error
	for range localAttempts {
		l, err := testsvc.Start(ctx, testsvc.Options{StatePrefix: "tidemark-testenv-", PGVersion: pgVersionOption(version)})
		if err == nil {
			return localServices(l), nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func localServices(l *testsvc.Local) *services {
	stop := func(ctx context.Context, failed bool) error {
		keep := failed || flagSet(os.Getenv, EnvKeepState)
		if err := l.Stop(ctx, keep); err != nil {
			return err
		}
		if keep {
			fmt.Fprintf(os.Stderr, "testenv: server logs kept in %s\n", l.State)
		}
		return nil
	}
	return &services{
		pgURL:   l.PGURL(),
		brokers: l.Brokers(),
		source: fmt.Sprintf("local binaries (PostgreSQL %s, Kafka %s, state %s)",
			l.PGAddr(), l.KafkaAddr(), l.State),
		stop: stop,
	}
}

// pgVersionOption is testsvc.Options.PGVersion for a wanted major version (0: the default).
func pgVersionOption(version int) string {
	if version == 0 {
		return ""
	}
	return strconv.Itoa(version)
}
