//go:build tempest_notrace

package tempest

// tracingBuilt: see tracing_built.go.
const tracingBuilt = false
