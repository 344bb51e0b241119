//go:build !linux

package tempest_test

import (
	"os"
	"testing"
)

// simDataDir returns a directory for a simulated node's data, removed
// when the test ends: under TEMPEST_SIM_DIR when set (a memory file
// system makes a seed much faster: fsync changes nothing a simulation
// can observe), else under t.TempDir.
func simDataDir(t *testing.T) string {
	t.Helper()
	parent := os.Getenv("TEMPEST_SIM_DIR")
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
