//go:build tempest_notrace

package tracing

// Built: see built.go.
const Built = false
