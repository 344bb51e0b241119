//go:build !tempest_notrace

package ariel

// tracingBuilt is false in a build with the tag tempest_notrace, which
// compiles the scheduler's tracing hooks out (every one is behind this
// constant), to measure what they cost when tracing is off. See
// docs/BENCHMARKS.md, "Tracing".
const tracingBuilt = true
