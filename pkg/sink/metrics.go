package sink

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the sink's Prometheus collectors. With no Registerer they are still updated but
// never exported.
type metrics struct {
	records       prometheus.Counter
	bytes         prometheus.Counter
	batches       prometheus.Counter
	batchDuration prometheus.Histogram
	errors        prometheus.Counter
	aborts        prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_sink_records_total",
			Help: "Records produced to Kafka and acknowledged (committed in exactly-once mode).",
		}),
		bytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_sink_bytes_total",
			Help: "Estimated size (topic, key, value, headers and 32 bytes overhead) of the records counted by tidemark_sink_records_total.",
		}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_sink_batches_total",
			Help: "Batches made durable (Kafka transactions committed in exactly-once mode).",
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tidemark_sink_batch_duration_seconds",
			Help:    "Time from a batch's first unit to its records being durable.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_sink_errors_total",
			Help: "Produce, flush and transaction errors.",
		}),
		aborts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidemark_sink_transaction_aborts_total",
			Help: "Kafka transactions aborted in exactly-once mode (an error, or a stop in the middle of a batch).",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var errs []error
	m.records = register(reg, m.records, &errs)
	m.bytes = register(reg, m.bytes, &errs)
	m.batches = register(reg, m.batches, &errs)
	m.batchDuration = register(reg, m.batchDuration, &errs)
	m.errors = register(reg, m.errors, &errs)
	m.aborts = register(reg, m.aborts, &errs)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under its name (a sink
// made again after a restart shares its predecessor's series).
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errs *[]error) C {
	if err := reg.Register(c); err != nil {
		if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		*errs = append(*errs, err)
	}
	return c
}
