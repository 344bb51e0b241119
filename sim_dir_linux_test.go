//go:build linux

package tempest_test

import (
	"os"
	"syscall"
	"testing"
)

// simDataDir returns a directory for a simulated node's data, removed
// when the test ends. A simulated crash ends a node's goroutines, not
// the machine's page cache, so what reached the files before it is read
// back after it whether or not it was fsync'd: fsync changes nothing a
// simulation can observe, yet it is most of a seed's time on a disk. So
// the directory is on the memory file system (/dev/shm, where fsync
// costs nothing: a seed runs about three times faster) when that has
// room for a run's seeds (512 MiB free), and under t.TempDir otherwise.
// TEMPEST_SIM_DIR names another parent directory.
func simDataDir(t *testing.T) string {
	t.Helper()
	parent := os.Getenv("TEMPEST_SIM_DIR")
	if parent == "" {
		var st syscall.Statfs_t
		if err := syscall.Statfs("/dev/shm", &st); err != nil || uint64(st.Bavail)*uint64(st.Bsize) < 512<<20 {
			return t.TempDir()
		}
		parent = "/dev/shm"
	}
	dir, err := os.MkdirTemp(parent, "tempest-sim-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
