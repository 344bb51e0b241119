package replica

// CatchUpStreaks decides what to tell an operator about the catch-ups
// of each follower, from their outcomes alone (no clock, no I/O): the
// node's replica loop retries a failed catch-up every second, so a
// follower that cannot catch up would otherwise log a line a second, or
// nothing if that line is at debug. The first failure of a streak is
// reported (CatchUpFailedFirst), and again when the error changes; the
// other retries are CatchUpFailedAgain; the success that ends a streak
// is CatchUpRecovered. An outcome that is no failure (a catch-up of that
// follower running already, a node shutting down: see CatchUpFailed)
// changes nothing. A follower's streak is kept until a catch-up of it
// succeeds: at most one entry per node name.
//
// Not safe for concurrent use: the node's replica loop owns it.
type CatchUpStreaks map[string]*catchUpStreak

type catchUpStreak struct {
	failures int    // failed catch-ups since the last success
	err      string // the text of the last error reported
}

// CatchUpEvent says what one catch-up's outcome is worth logging.
type CatchUpEvent int

const (
	CatchUpQuiet       CatchUpEvent = iota // nothing to tell (success with no failure before, or no failure)
	CatchUpFailedFirst                     // a streak of failures begins, or its error changed: warn
	CatchUpFailedAgain                     // the same failure again: debug
	CatchUpRecovered                       // success after failures: info
)

// CatchUpReport is Observe's verdict on one outcome.
type CatchUpReport struct {
	Event    CatchUpEvent
	Failures int // the streak's failures so far (for CatchUpRecovered: the ones it ended)
}

// Observe records the outcome err of one catch-up of follower and says
// what to log.
func (s CatchUpStreaks) Observe(follower string, err error) CatchUpReport {
	st := s[follower]
	switch {
	case err == nil:
		if st == nil {
			return CatchUpReport{}
		}
		delete(s, follower)
		return CatchUpReport{Event: CatchUpRecovered, Failures: st.failures}
	case !CatchUpFailed(err):
		n := 0
		if st != nil {
			n = st.failures
		}
		return CatchUpReport{Failures: n}
	}
	if st == nil {
		st = &catchUpStreak{}
		s[follower] = st
	}
	st.failures++
	// The text is what the operator reads: a failure that reads the same
	// is the same news, whatever its chain of wrapped errors.
	if text := err.Error(); st.failures == 1 || text != st.err {
		st.err = text
		return CatchUpReport{Event: CatchUpFailedFirst, Failures: st.failures}
	}
	return CatchUpReport{Event: CatchUpFailedAgain, Failures: st.failures}
}
