//go:build unix

package ariel_test

import (
	"syscall"
	"testing"
)

// cpuPerOp starts measuring the process's CPU time (user and system, all
// threads); the function it returns reports it per operation as
// "cpu-ns/op". On a machine shared with other work, wall-clock ns/op
// includes time spent waiting for a core; CPU time does not.
func cpuPerOp(b *testing.B) func() {
	start := cpuNow()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(cpuNow()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuNow() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
