//go:build linux

package tempest_test

import "syscall"

// memDir is /dev/shm when it has room for a run's seeds (512 MiB free),
// else "".
func memDir() string {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || uint64(st.Bavail)*uint64(st.Bsize) < 512<<20 {
		return ""
	}
	return "/dev/shm"
}
