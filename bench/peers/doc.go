// Package peers benchmarks Tempest's scheduler against peer actor libraries
// (protoactor-go) and Go channels on the same workloads, in one run. It is a
// separate module so the main module does not depend on the peers.
package peers
