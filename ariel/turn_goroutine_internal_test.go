package ariel

import "testing"

// The in-turn check costs every blocking ask one stack walk; this is its
// price from an ordinary goroutine (compare with BenchmarkAsk).
func BenchmarkOnTurnGoroutine(b *testing.B) {
	for b.Loop() {
		if onTurnGoroutine() {
			b.Fatal("a test goroutine reported as a turn goroutine")
		}
	}
}
