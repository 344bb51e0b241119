package main

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
)

// corruptExit gives a start-up error caused by a damaged file in the
// data directory its own exit code (a supervisor must not restart the
// node in a loop, as it may for other failures) and says what to do.
// Other errors pass unchanged.
func corruptExit(err error, dataDir string) error {
	var (
		store *prospero.CorruptError
		log   *placement.CorruptError
		what  string
	)
	switch {
	case errors.As(err, &store) && errors.Is(err, prospero.ErrSentNotCommitted):
		what = fmt.Sprintf("the file is sound, the disk failed a write (see the cause: free space or fix the disk), "+
			"and the node stopped so that its shards fail over; start it again once the disk works: "+
			"it first writes back from %s.pending and %[1]s.pending.1 what it had sent to its replicas", store.Path)
	case errors.As(err, &store):
		what = fmt.Sprintf("restore %s from a backup; or move it aside to start with an empty state store: "+
			"actors this node held at rest start from their initial state unless peers hold their state", store.Path)
	case errors.As(err, &log):
		what = fmt.Sprintf("restore %s from a backup; or move the data directory %s aside and start the node "+
			"empty under a new name: it joins as a new member and catches up from the others "+
			"(a node whose raft data was lost must not come back under its old name)", filepath.Join(dataDir, "raft"), dataDir)
	default:
		return err
	}
	return withCode(exitCorrupt, fmt.Errorf("%w\nwhat to do: %s", err, what))
}
