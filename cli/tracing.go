package cli

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
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
	protoVar := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	proto := strings.TrimSpace(getenv(protoVar))
	if proto == "" {
		protoVar = "OTEL_EXPORTER_OTLP_PROTOCOL"
		proto = strings.TrimSpace(getenv(protoVar))
	}
	if proto != "" && proto != "http/protobuf" {
		return nil, withCode(exitUsage, fmt.Errorf("%s=%q: only http/protobuf is supported", protoVar, proto))
	}
	if err := checkOTELEnv(getenv); err != nil {
		return nil, withCode(exitUsage, err)
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

// checkOTELEnv refuses the OTEL_* values the SDK would otherwise drop
// with at most a log line, leaving tracing on with a setting the
// operator did not choose (an endpoint that is no URL, an unknown
// sampler, a ratio that is no number). Only read when tracing is on.
func checkOTELEnv(env func(string) string) error {
	// The SDK trims every value (one from a file ends in a newline).
	getenv := func(k string) string { return strings.TrimSpace(env(k)) }
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		v := getenv(k)
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
			return fmt.Errorf("%s=%q: want an http:// or https:// URL with a host", k, v)
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"} {
		if v := getenv(k); v != "" {
			if _, err := strconv.ParseUint(v, 10, 31); err != nil {
				return fmt.Errorf("%s=%q: want a number of milliseconds", k, v)
			}
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"} {
		if v := getenv(k); v != "" && v != "gzip" && v != "none" {
			return fmt.Errorf("%s=%q: want gzip or none", k, v)
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_RESOURCE_ATTRIBUTES"} {
		if v := getenv(k); v != "" {
			if err := checkKeyValues(v); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
		"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
		"OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"} {
		if v := getenv(k); v != "" {
			if _, err := os.Stat(v); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	sampler := strings.ToLower(getenv("OTEL_TRACES_SAMPLER")) // as the SDK reads it
	switch sampler {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if v := getenv("OTEL_TRACES_SAMPLER_ARG"); v != "" {
			if r, err := strconv.ParseFloat(v, 64); err != nil || !(r >= 0 && r <= 1) { // NaN too
				return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1", v)
			}
		}
	default:
		return fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio or one of them with parentbased_", sampler)
	}
	return nil
}

// checkKeyValues checks a list of key=value pairs separated by commas, as
// OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES hold them
// (values percent-encoded).
func checkKeyValues(v string) error {
	for p := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(p, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return fmt.Errorf("%q: want key=value pairs separated by commas", p)
		}
		if _, err := url.PathUnescape(strings.TrimSpace(val)); err != nil {
			return fmt.Errorf("%q: the value is not percent-encoded: %w", p, err)
		}
	}
	return nil
}
