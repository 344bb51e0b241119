package cluster

import (
	"errors"

	"github.com/tempest-actors/tempest/actor"
)

// The node's errors that the engine returns too. The root package
// exports them under the same names (and documents them there), so that
// errors.Is holds whichever of the two made the error.
var (
	ErrNotStarted              = errors.New("tempest: node not started")
	ErrClosed            error = closedError{}
	ErrNoQuorum          error = noQuorumError{}
	ErrHandoffIncomplete       = errors.New("tempest: state at rest not handed off")
)

type noQuorumError struct{}

func (noQuorumError) Error() string        { return "tempest: no placement quorum (no raft leader known)" }
func (noQuorumError) Is(target error) bool { return target == actor.ErrProcessUnavailable }

type closedError struct{}

func (closedError) Error() string        { return "tempest: node closed" }
func (closedError) Is(target error) bool { return target == actor.ErrProcessUnavailable }

// NotReadyError says which step of joining a cluster a node waits for
// (Engine.Readiness; the root package gives it as its own NotReadyError).
type NotReadyError struct {
	Node   string
	Reason string
}

func (e *NotReadyError) Error() string { return "tempest: " + e.Node + " not ready: " + e.Reason }
