//go:build linux || darwin

package prospero

import "syscall"

// diskSpace returns the bytes available to this process on the file
// system holding dir, and its size.
func diskSpace(dir string) (free, size uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return uint64(st.Bavail) * uint64(st.Bsize), uint64(st.Blocks) * uint64(st.Bsize), nil
}
