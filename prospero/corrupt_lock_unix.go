//go:build unix

package prospero

import (
	"os"
	"syscall"
)

// lockedElsewhere takes a shared lock on f, which bbolt locks exclusively
// while a process has the store open, and reports whether another
// process holds it: then nothing of f is read (a file being written
// reads torn), and bbolt's own open reports the lock.
func lockedElsewhere(f *os.File) bool {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) != nil
}
