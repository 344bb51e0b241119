//go:build tempest_notrace

package ariel

// tracingBuilt: see tracing_built.go. This build has no tracing hooks;
// Config.Tracer is refused.
const tracingBuilt = false
