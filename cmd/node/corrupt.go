package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

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
	case errors.As(err, &store) && isPendingLog(store.Path):
		db := strings.TrimSuffix(strings.TrimSuffix(store.Path, ".1"), ".pending")
		what = fmt.Sprintf("%s is part of the pending log (writes sent to replicas before they reached %s): "+
			"never move it aside alone, that would lose them; if it was removed or replaced while the node ran, "+
			"start the node again (it creates the file anew); if the start stops on it again, move %s, %[2]s.pending "+
			"and %[2]s.pending.1 aside together: the node starts with an empty state store and, in a cluster, "+
			"catches up from the replicas of its peers", store.Path, db, db)
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

// isPendingLog reports whether path names one of a state store's pending
// log files.
func isPendingLog(path string) bool {
	return strings.HasSuffix(path, ".pending") || strings.HasSuffix(path, ".pending.1")
}
