//go:build !unix

package prospero

import "os"

// lockedElsewhere is the unix check where there is no flock: bbolt's own
// open reports a store another process holds.
func lockedElsewhere(*os.File) bool { return false }
