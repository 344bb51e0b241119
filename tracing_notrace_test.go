//go:build tempest_notrace

package tempest_test

import (
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	tempest "github.com/tempest-actors/tempest"
)

// A build without tracing code refuses a tracer provider instead of
// ignoring it. (make test runs this and a few of the node's tests on this
// build, and vets every package with the tag.)
func TestNoTracingBuildRefusesProvider(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(t.Context())
	err := (tempest.Config{DataDir: "x", TracerProvider: tp}).Validate()
	if !errors.Is(err, tempest.ErrInvalidConfig) {
		t.Fatalf("TracerProvider on a build without tracing: %v, want ErrInvalidConfig", err)
	}
}
