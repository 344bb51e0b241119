// Package k8s holds no code: it is the Go module whose tests validate the
// Kubernetes manifests in this directory without a cluster. The tests
// decode every manifest strictly into the Kubernetes API types (an
// unknown or misspelt field fails), check the invariants that make the
// StatefulSet work (selectors, the headless service, ports and protocols,
// probes, secrets, the drain budget), check the flags in the container's
// arguments against the real `tempest agent`, and probe a real agent's
// health endpoints.
//
// It is a module of its own so that k8s.io/api stays out of the main
// module. Run it with `make test`, or:
//
//	cd deploy/k8s && go test ./...
//
// TEMPEST_BIN names a prebuilt tempest binary; otherwise the tests build
// one from ../../cmd/node.
package k8s
