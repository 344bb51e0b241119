package cli

import (
	"context"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newTracerProvider builds the agent's OpenTelemetry tracer provider from
// the standard OTEL_* environment variables, or returns nil when tracing
// is off, which is the default. Tracing is on when OTEL_TRACES_EXPORTER is
// "otlp", or when it is unset and an OTLP endpoint is given
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turn it off. Spans
// go over OTLP/HTTP (protobuf); the exporter reads its endpoint, headers,
// timeout and compression from OTEL_EXPORTER_OTLP_*, the sampler comes
// from OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default
// parentbased_always_on), and the resource from OTEL_SERVICE_NAME
// (default "tempest") and OTEL_RESOURCE_ATTRIBUTES.
func newTracerProvider(ctx context.Context, getenv func(string) string, node string) (*sdktrace.TracerProvider, error) {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
	case "none":
		return nil, nil
	case "otlp":
	default:
		return nil, withCode(exitUsage, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exp))
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, withCode(exitUsage, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%q: only http/protobuf is supported", proto))
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	base := resource.NewSchemaless(attribute.String("service.name", "tempest"),
		attribute.String("service.instance.id", node), attribute.String("service.version", version))
	res, err := resource.Merge(base, resource.Environment())
	if err != nil {
		res = base
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
