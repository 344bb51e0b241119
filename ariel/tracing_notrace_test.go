//go:build tempest_notrace

package ariel_test

import (
	"testing"
	"time"

	"github.com/tempest-actors/tempest/ariel"
)

// A build without tracing refuses a tracer rather than ignore it.
func TestNoTracingBuildRefusesTracer(t *testing.T) {
	if _, err := ariel.New(ariel.Config{Tracer: &turnRec{}}); err == nil {
		t.Fatal("a build without tracing took Config.Tracer")
	}
}

// turnRec is a TurnTracer that records nothing.
type turnRec struct{}

func (*turnRec) BeginTurn(any, ariel.TurnTimes) any { return nil }
func (*turnRec) EndTurn(any, time.Time)             {}
