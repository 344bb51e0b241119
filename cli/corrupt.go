package cli

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	tempest "github.com/tempest-actors/tempest"
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
		// the node's state store and its pending log
		db          = filepath.Join(dataDir, tempest.StateFile)
		pendingLogs = prospero.PendingLogFiles(db)
	)
	switch {
	case errors.As(err, &store) && errors.Is(err, prospero.ErrSentNotCommitted):
		logs := prospero.PendingLogFiles(store.Path)
		what = fmt.Sprintf("the file is sound, the disk failed a write (see the cause: free space or fix the disk), "+
			"and the node stopped so that its shards fail over; start it again once the disk works: "+
			"it first writes back from %s and %s what it had sent to its replicas", logs[0], logs[1])
	case errors.As(err, &store) && slices.Contains(pendingLogs[:], store.Path):
		what = fmt.Sprintf("%s is part of the pending log (writes sent to replicas before they reached %s): "+
			"never move it aside alone, that would lose them; if it was removed or replaced while the node ran, "+
			"start the node again (it creates the file anew); if the start stops on it again, move %[2]s, %s "+
			"and %s aside together and remove %s: the node starts with an empty state store and, in a cluster, "+
			"catches up from the replicas of its peers", store.Path, db, pendingLogs[0], pendingLogs[1], prospero.MarkFile(db))
	case errors.As(err, &store) && errors.Is(err, prospero.ErrStoreReplaced):
		what = fmt.Sprintf("in a cluster, put back the file this node last ran with if you have it; otherwise move the "+
			"whole data directory %s aside and start the node empty: it gets a new data ID, is added back as a new "+
			"server, and its shards' replicas keep serving what was committed (a node that started on this file "+
			"would serve it as their owner, and its replicas would copy it over newer state). If the file was "+
			"restored on purpose (a standalone node; every node of a cluster from its backup), remove %s and start "+
			"again", dataDir, prospero.MarkFile(db))
	case errors.As(err, &store) && store.Path == prospero.MarkFile(db):
		what = fmt.Sprintf("%s only records which %s this node last ran with: remove it and start again "+
			"(the check is skipped once, and the file marked anew); or restore the data directory from a backup", store.Path, db)
	case errors.As(err, &store):
		what = fmt.Sprintf("restore %s from a backup; or move it aside to start with an empty state store: "+
			"actors this node held at rest start from their initial state unless peers hold their state; "+
			"either way remove %s too (it names the file this node last ran with)", store.Path, prospero.MarkFile(db))
	case errors.As(err, &log) && filepath.Base(log.Path) == placement.DataIDFile:
		what = fmt.Sprintf("remove %s: the node gets a new data ID, and the raft leader removes its old server "+
			"and adds it back as a new one, which catches up from the others; nothing needs a backup", log.Path)
	case errors.As(err, &log) && filepath.Base(log.Path) == placement.MemberFile:
		what = fmt.Sprintf("%s names the node whose raft state this data directory holds: if that is this node "+
			"(it ran on this data directory under this name), write its name and a newline into the file (a new one "+
			"if it is missing) and start "+
			"again; otherwise move the data directory %s aside and start the node empty (it gets a new data ID and "+
			"catches up from the others), or restore the whole data directory from a backup", log.Path, dataDir)
	case errors.As(err, &log):
		what = fmt.Sprintf("move the data directory %s aside and start the node empty, under its name or a new one: "+
			"it gets a new data ID, the raft leader adds it back as a new server and it catches up from the others; "+
			"or restore %s from a backup and remove %s (a raft log from a backup may lack entries this node "+
			"acknowledged: with its old data ID it would be taken for the voter it was)",
			dataDir, filepath.Join(dataDir, "raft"), filepath.Join(dataDir, placement.DataIDFile))
	default:
		return err
	}
	return withCode(exitCorrupt, fmt.Errorf("%w\nwhat to do: %s", err, what))
}
