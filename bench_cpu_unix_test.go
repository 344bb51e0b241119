//go:build unix

package tempest_test

import (
	"syscall"
	"testing"
)

// cpuPerOp starts measuring the process's CPU time (user and system, all
// threads: every node of an in-process cluster and the clients); the
// function it returns reports it per operation as "cpu-us/op". On a
// machine shared with other work, wall-clock times include time spent
// waiting for a core; CPU time does not.
func cpuPerOp(b *testing.B) func(ops int) {
	start := cpuNow()
	return func(ops int) {
		if ops > 0 {
			b.ReportMetric(float64(cpuNow()-start)/1e3/float64(ops), "cpu-us/op")
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
