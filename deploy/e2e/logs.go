package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Messages and keys the node logs (package tempest: LogActivated,
// LogDeactivated, LogKeyNode, LogKeyActor, LogKeyIncarnation).
const (
	msgActivated   = "actor activated"
	msgDeactivated = "actor deactivated"
	msgStarted     = "node started"
)

// span is one activation of an actor on a node: [from, to).
type span struct {
	node, actor string
	incarnation uint64
	from, to    time.Time
	open        bool // never deactivated: ended by a crash or still active
}

// logLine is the part of a JSON log line the analysis reads.
type logLine struct {
	Time        time.Time `json:"time"`
	Msg         string    `json:"msg"`
	Node        string    `json:"node"`
	Actor       string    `json:"actor"`
	Incarnation uint64    `json:"incarnation"`
}

// activationSpans reads one node's log (every process it ran, in order)
// into activation spans. crashes are the times the node's process was
// killed: a span still open when its process died ends at the first
// crash after it began. A span still open at a restart without a known
// crash ends at the restart; one open at the end of the log ends at end.
func activationSpans(node, log string, crashes []time.Time, end time.Time) []span {
	var spans []span
	open := map[string]*span{}
	// closeAll ends the spans a process left open when it died: at the
	// first known crash after the span began and before at, else at at.
	closeAll := func(at time.Time) {
		for a, s := range open {
			s.to, s.open = at, true
			for _, c := range crashes {
				if c.After(s.from) && c.Before(s.to) {
					s.to = c
				}
			}
			spans = append(spans, *s)
			delete(open, a)
		}
	}
	for _, raw := range strings.Split(log, "\n") {
		raw = strings.TrimSpace(raw)
		if !strings.HasPrefix(raw, "{") {
			continue
		}
		var l logLine
		if json.Unmarshal([]byte(raw), &l) != nil || l.Time.IsZero() {
			continue
		}
		switch l.Msg {
		case msgStarted:
			closeAll(l.Time)
		case msgActivated:
			if _, ok := open[l.Actor]; !ok {
				open[l.Actor] = &span{node: node, actor: l.Actor, incarnation: l.Incarnation, from: l.Time}
			}
		case msgDeactivated:
			if s, ok := open[l.Actor]; ok {
				s.to = l.Time
				spans = append(spans, *s)
				delete(open, l.Actor)
			}
		}
	}
	closeAll(end)
	return spans
}

// overlap is one actor active on two nodes at once.
type overlap struct {
	actor string
	a, b  span
	by    time.Duration
}

func (o overlap) String() string {
	return fmt.Sprintf("%s on %s [%s, %s) and on %s [%s, %s): %s",
		o.actor, o.a.node, o.a.from.Format("15:04:05.000"), o.a.to.Format("15:04:05.000"),
		o.b.node, o.b.from.Format("15:04:05.000"), o.b.to.Format("15:04:05.000"), o.by)
}

// overlaps finds every pair of spans of the same actor on different
// nodes whose intervals intersect.
func overlaps(spans []span) []overlap {
	by := map[string][]span{}
	for _, s := range spans {
		by[s.actor] = append(by[s.actor], s)
	}
	var out []overlap
	actors := make([]string, 0, len(by))
	for a := range by {
		actors = append(actors, a)
	}
	sort.Strings(actors)
	for _, a := range actors {
		ss := by[a]
		slices.SortFunc(ss, func(x, y span) int { return x.from.Compare(y.from) })
		for i := range ss {
			for j := i + 1; j < len(ss) && ss[j].from.Before(ss[i].to); j++ {
				if ss[i].node != ss[j].node {
					out = append(out, overlap{actor: a, a: ss[i], b: ss[j], by: earliest(ss[i].to, ss[j].to).Sub(ss[j].from)})
				}
			}
		}
	}
	return out
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// frozen is a time a node's container was paused: [from, to).
type frozen struct{ from, to time.Time }

// whileFrozen reports whether o lies wholly within a time one of its two
// nodes was frozen, or within grace after it thawed, and how long after
// the thaw it ended (0 when it ended before the thaw). A frozen process
// runs nothing, so an activation it held then is not running beside the
// other node's; once thawed it must find its lease lapsed and let go
// (within grace: what its fence loop takes to see the lapse and
// passivate).
func whileFrozen(o overlap, pauses map[string][]frozen, grace time.Duration) (bool, time.Duration) {
	from, to := o.b.from, earliest(o.a.to, o.b.to)
	for _, node := range []string{o.a.node, o.b.node} {
		for _, p := range pauses[node] {
			if !from.Before(p.from) && !to.After(p.to.Add(grace)) {
				return true, max(to.Sub(p.to), 0)
			}
		}
	}
	return false, 0
}
