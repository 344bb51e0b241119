package cli

import (
	"context"
	"testing"
)

// Tracing is off unless the OTEL_* variables ask for OTLP; what the
// agent cannot export, and a value the SDK would drop (with at most a
// log line), is a configuration error, not silently something else.
func TestTracerProviderFromEnv(t *testing.T) {
	cases := []struct {
		env     map[string]string
		on, bad bool
	}{
		{env: nil},
		{env: map[string]string{"OTEL_SERVICE_NAME": "x"}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, bad: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, bad: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://"}, bad: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://:4318"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "NaN"}, bad: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://c:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "sometimes"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1%"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_COMPRESSION": "zstd"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "api-key"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%2Cb,x=y"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=%zz"}, bad: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_CERTIFICATE": "/no/such/ca.pem"}, bad: true},
		// Read as the SDK reads them: trimmed, the sampler in any case.
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318\n", "OTEL_TRACES_SAMPLER": "ParentBased_TraceIdRatio",
			"OTEL_TRACES_SAMPLER_ARG": " 0.5", "OTEL_EXPORTER_OTLP_TIMEOUT": "1000 "}, on: true},
		// Off: the values are not read.
		{env: map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}},
	}
	for _, c := range cases {
		tp, err := newTracerProvider(context.Background(), func(k string) string { return c.env[k] }, "n1")
		if c.bad != (err != nil) {
			t.Fatalf("%v: error %v, want one: %v", c.env, err, c.bad)
		}
		if (tp != nil) != c.on {
			t.Fatalf("%v: provider %v, want on: %v", c.env, tp != nil, c.on)
		}
		if tp != nil {
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}
