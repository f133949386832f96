package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/tidemark/cdc/internal/testsvc"
)

// localAttempts is how often fromLocal retries with new ports: a port picked as free can be
// taken by someone else before the server binds it.
const localAttempts = 2

// fromLocal starts PostgreSQL and Kafka from local binaries with scripts/services.sh, in a
// private state folder, on free ports.
func fromLocal(ctx context.Context) (*services, error) {
	var errs []error
	for range localAttempts {
		l, err := testsvc.Start(ctx, testsvc.Options{StatePrefix: "tidemark-testenv-"})
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
