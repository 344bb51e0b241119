// Package tracing is a node's OpenTelemetry tracing of asks, tells and
// turns: the spans named at the top of tracing.go, started by the node's Ask and Tell (Tracer.Ask,
// Tracer.Tell), by the routing layer's send to another node (Send, which
// carries the span's context in the envelope) and by the owner's
// admission of such mail (RemoteParent, NewOwner, Refused); the
// scheduler reports a traced turn's timestamps (ariel.TurnTracer,
// ariel.CommitTracer), which become spans after the fact. A build with
// the tag tempest_notrace compiles it out (Built is false).
package tracing
