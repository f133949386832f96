package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/tidemark/cdc/internal/testsvc"
)

// debeziumFormatNames are the formats the debezium scenario can run both tools with: Tidemark's
// CDC_VALUE_FORMAT json against Debezium's JsonConverter (schemas.enable=false), and avro
// against Apicurio Registry's AvroConverter, both on the same registry.
var debeziumFormatNames = []string{"json", "avro"}

// apicurioConverterVersion is the converter scripts/services.sh install-debezium fetches (the
// 2.6 line: the 3.x converter's dependencies are not all on Maven Central).
const apicurioConverterVersion = "2.6.13.Final"

// apicurioV2API is the path of Apicurio Registry's own v2 API, which its 2.6 converter uses
// (Apicurio Registry 3 still serves it).
const apicurioV2API = "/apis/registry/v2"

// debeziumFormats runs the debezium scenario once per -debezium-formats format, each with its
// own database, slots and topics; a failed format does not stop the next.
func (b *bench) debeziumFormats(ctx context.Context, res *results) error {
	var errs []error
	for _, f := range strings.Split(b.o.debeziumFormats, ",") {
		if ctx.Err() != nil {
			break
		}
		r, err := b.debezium(ctx, f)
		if f == "avro" {
			res.DebeziumAvro = r
		} else {
			res.Debezium = r
		}
		if err != nil {
			b.logf("debezium %s: %v", f, err)
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
		}
	}
	return errors.Join(errs...)
}

// debeziumConverter is one format's settings for both tools.
type debeziumConverter struct {
	name    string            // for the report
	plugins string            // the worker's plugin.path
	worker  map[string]string // the worker's converter properties
	cdc     map[string]string // Tidemark's variables
	stop    func()            // stops the registry the bench started
}

// debeziumConverter returns format's settings; for avro it starts the registry (or takes
// CDC_TEST_SCHEMA_REGISTRY_URL, which must be Apicurio Registry's: the converter speaks its v2
// API) and adds the converter's plugin folder to plugins.
func (b *bench) debeziumConverter(ctx context.Context, format, plugins string) (debeziumConverter, error) {
	if format != "avro" {
		return debeziumConverter{
			name:    "org.apache.kafka.connect.json.JsonConverter, schemas.enable=false (keys and values)",
			plugins: plugins, cdc: map[string]string{"CDC_VALUE_FORMAT": format}, stop: func() {},
		}, nil
	}
	registry, source, stop, err := b.schemaRegistry(ctx)
	if err != nil {
		return debeziumConverter{}, err
	}
	base, ok := strings.CutSuffix(registry, testsvc.RegistryAPI)
	if !ok {
		stop()
		return debeziumConverter{}, fmt.Errorf("registry %s: Debezium's Avro converter needs Apicurio Registry (a URL ending in %s)", registry, testsvc.RegistryAPI)
	}
	dc := debeziumConverter{
		name: fmt.Sprintf("Apicurio Registry's io.apicurio.registry.utils.converter.AvroConverter %s (keys and values; Confluent wire format, "+
			"4-byte content ids, schemas registered on first use) on %s", apicurioConverterVersion, source),
		plugins: plugins + "," + filepath.Join(testsvc.CacheDir(), "apicurio-converter-"+apicurioConverterVersion),
		worker:  apicurioConverter(base + apicurioV2API),
		cdc:     formatVars(format, registry),
		stop:    stop,
	}
	return dc, nil
}

// apicurioConverter are the worker properties that make Apicurio's AvroConverter the key and
// value converter, writing Confluent's wire format (magic byte, 4-byte id) as Tidemark does.
func apicurioConverter(url string) map[string]string {
	m := make(map[string]string)
	for _, side := range []string{"key", "value"} {
		c := side + ".converter"
		m[c] = "io.apicurio.registry.utils.converter.AvroConverter"
		m[c+".apicurio.registry.url"] = url
		m[c+".apicurio.registry.auto-register"] = "true"
		m[c+".apicurio.registry.find-latest"] = "true"
		m[c+".apicurio.registry.as-confluent"] = "true"
		m[c+".apicurio.registry.use-id"] = "contentId"
		m[c+".apicurio.registry.headers.enabled"] = "false"
	}
	return m
}

// printDebeziumFormats compares the formats of the debezium scenario: Tidemark's avro over its
// json (rates and cdc CPU per record), and Tidemark's CPU per record over each Debezium
// profile's in the same format.
func printDebeziumFormats(w io.Writer, js, av *debeziumResult) {
	if js == nil || av == nil || len(js.Tools) == 0 || len(av.Tools) == 0 {
		return
	}
	tj, ta := js.Tools[0], av.Tools[0]
	fmt.Fprintf(w, "\nTidemark avro / json (debezium scenario, same sizes, separate runs): snapshot rows/s %.2f, cdc CPU per row %.2f; catch-up changes/s %.2f, cdc CPU per change %.2f (target <= %.1f)\n",
		over(ta.Snapshot.PerSecond, tj.Snapshot.PerSecond), over(cpuPer(ta.Snapshot), cpuPer(tj.Snapshot)),
		over(ta.CatchUp.PerSecond, tj.CatchUp.PerSecond), over(cpuPer(ta.CatchUp), cpuPer(tj.CatchUp)), avroCPUTarget)
	for _, r := range []*debeziumResult{js, av} {
		for _, d := range r.Tools[1:] {
			fmt.Fprintf(w, "Tidemark / %s, %s: cdc CPU per record snapshot %.3f, catch-up %.3f (target <= 0.05)\n",
				d.Name, r.Format, over(cpuPer(r.Tools[0].Snapshot), cpuPer(d.Snapshot)), over(cpuPer(r.Tools[0].CatchUp), cpuPer(d.CatchUp)))
		}
	}
}

// cpuPer is a run's CPU seconds per record (0 without records).
func cpuPer(t toolRun) float64 {
	if t.Count <= 0 {
		return 0
	}
	return t.CPUSeconds / float64(t.Count)
}
