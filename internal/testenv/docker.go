package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/modules/redpanda"
)

const (
	// postgresImage is the default; CDC_TEST_PG_VERSION picks postgres:<version>.
	postgresImage = "postgres:15"
	redpandaImage = "docker.redpanda.com/redpandadata/redpanda:v25.2.4"

	// dockerPingTimeout keeps machines without a Docker engine from waiting.
	dockerPingTimeout = 3 * time.Second
	// dockerStartTimeout bounds image pulls and container start-up.
	dockerStartTimeout = 3 * time.Minute
)

// fromDocker starts PostgreSQL and Redpanda containers. Any failure means "not available".
func fromDocker(ctx context.Context) (*services, error) {
	if err := pingDocker(ctx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, dockerStartTimeout)
	defer cancel()

	var containers []testcontainers.Container
	stop := func(context.Context, bool) error {
		var errs []error
		for _, c := range containers {
			if err := testcontainers.TerminateContainer(c); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	fail := func(err error) (*services, error) {
		return nil, errors.Join(err, stop(ctx, true))
	}

	image := postgresImage
	if version, err := wantPGVersion(os.Getenv); err != nil {
		return nil, err
	} else if version != 0 {
		image = "postgres:" + strconv.Itoa(version)
	}
	pg, err := postgres.Run(ctx, image,
		postgres.WithDatabase("tidemark"),
		postgres.WithUsername("postgres"),
		postgres.WithPassword("postgres"),
		testcontainers.WithCmdArgs(
			"-c", "wal_level=logical",
			"-c", "max_replication_slots=40",
			"-c", "max_wal_senders=40",
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
		),
		postgres.BasicWaitStrategies(),
	)
	if pg != nil {
		containers = append(containers, pg)
	}
	if err != nil {
		return fail(fmt.Errorf("run %s: %w", image, err))
	}
	pgURL, err := pg.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return fail(fmt.Errorf("postgres connection string: %w", err))
	}

	rp, err := redpanda.Run(ctx, redpandaImage)
	if rp != nil {
		containers = append(containers, rp)
	}
	if err != nil {
		return fail(fmt.Errorf("run %s: %w", redpandaImage, err))
	}
	seed, err := rp.KafkaSeedBroker(ctx)
	if err != nil {
		return fail(fmt.Errorf("redpanda seed broker: %w", err))
	}
	return &services{
		pgURL:   pgURL,
		brokers: []string{seed},
		source:  "testcontainers (" + image + ", " + redpandaImage + ")",
		stop:    stop,
	}, nil
}

// pingDocker checks for a working Docker engine within dockerPingTimeout. The provider
// constructor may panic on odd configurations; that counts as "no engine" too.
func pingDocker(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("docker provider: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, dockerPingTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("docker provider: %v", r)
			}
		}()
		p, err := testcontainers.NewDockerProvider()
		if err != nil {
			done <- fmt.Errorf("docker provider: %w", err)
			return
		}
		// Health closes the provider.
		if err := p.Health(ctx); err != nil {
			done <- fmt.Errorf("docker engine: %w", err)
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("docker engine: no answer within %s", dockerPingTimeout)
	}
}
