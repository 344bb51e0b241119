package tempest_test

import (
	"os"
	"testing"
)

// simDataDir returns a directory for a simulated node's data, removed
// when the test ends. A simulated crash ends a node's goroutines, not
// the machine's page cache, so what reached the files before it is read
// back after it whether or not it was fsync'd: fsync changes nothing a
// simulation can observe, yet it is most of a seed's time on a disk. So
// the directory is on a memory file system when there is one with room
// (memDir: /dev/shm on Linux, where fsync costs nothing and a seed runs
// about three times faster), and under t.TempDir otherwise.
// TEMPEST_SIM_DIR names another parent directory.
func simDataDir(t *testing.T) string {
	t.Helper()
	parent := os.Getenv("TEMPEST_SIM_DIR")
	if parent == "" {
		parent = memDir()
	}
	if parent == "" {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp(parent, "tempest-sim-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
