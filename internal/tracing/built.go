//go:build !tempest_notrace

package tracing

// Built is false in a build with the tag tempest_notrace, which
// compiles the node's tracing hooks out (every one is behind this
// constant, as the scheduler's are), to measure what they cost when
// tracing is off: see docs/BENCHMARKS.md, "Tracing". The node refuses a
// TracerProvider in such a build.
const Built = true
