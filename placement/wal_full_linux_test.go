package placement_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	walfs "github.com/hashicorp/raft-wal/fs"
)

// TestWALSegmentNotLeftBehindOnAFullDisk: a raft log segment that could
// not be preallocated (the disk is full) is removed, so that the next
// attempt to create it, once there is room, does not fail with "file
// exists" for good (which kept a node that had filled its disk from ever
// appending to its raft log again). It needs a small tmpfs, so root.
func TestWALSegmentNotLeftBehindOnAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	fs := walfs.New()
	const name = "00000000000000000001-0000000000000001.wal"
	if _, err := fs.Create(dir, name, 1<<20); err == nil {
		t.Fatal("a 1 MiB segment fit in a 64 KiB tmpfs")
	}
	if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the segment that could not be preallocated: %v, want it removed", err)
	}
	f, err := fs.Create(dir, name, 16<<10) // room again
	if err != nil {
		t.Fatalf("creating the segment again: %v", err)
	}
	_ = f.Close()
	if _, err := fs.Create(dir, "too-big.wal", math.MaxInt32+1); err == nil {
		t.Fatal("a segment over the maximum size was created")
	}
	if _, err := os.Stat(filepath.Join(dir, "too-big.wal")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the segment over the maximum size: %v, want none", err)
	}
}
