//go:build !linux

package tempest_test

// memDir: no memory file system is known here.
func memDir() string { return "" }
