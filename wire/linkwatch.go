package wire

import (
	"sync"
	"sync/atomic"
)

// LinkWatch follows which peers' links are down, from a transport's
// LinkEvents, so that a sender can keep mail that may wait (mail for
// virtual actors, which the table may route elsewhere) from a link that
// went down until it is up again: a transport queues such mail behind a
// new dial, and if the peer is gone the dial fails after its handshake
// timeout and every ask queued there fails as its link's (ErrLinkLost,
// outcome unknown), though none of it left. While a peer is Down, one
// attempt at a time to bring its link back runs in the background
// (Connect: the transport's). A peer is down from its link's down event
// until its up event, or until such an attempt succeeds (which also mends
// a down event that arrived after a later up). Down is one atomic load
// when no link is down. Set the fields before the first Event.
type LinkWatch struct {
	// Connect brings the link to peer up, or fails (nil: nothing is
	// tried; the link comes back when something else connects).
	Connect func(peer string) error
	// OnUp is called when a link that was down comes up (nil: nothing).
	OnUp func()

	// down holds the peers down, copied on every change (link events are
	// rare; a send only reads it, without a lock). Nil: none.
	down atomic.Pointer[map[string]*linkDown]
	mu   sync.Mutex // serializes changes of down
}

// linkDown is a peer whose link is down: connecting is set while an
// attempt to connect to it runs.
type linkDown struct{ connecting atomic.Bool }

// Event follows a transport's link event.
func (l *LinkWatch) Event(ev LinkEvent) {
	if ev.Up {
		l.up(ev.Peer)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.down.Load()
	if old != nil && (*old)[ev.Peer] != nil {
		return
	}
	m := map[string]*linkDown{ev.Peer: {}}
	if old != nil {
		for p, d := range *old {
			m[p] = d
		}
	}
	l.down.Store(&m)
}

// up marks peer's link up, and calls OnUp if it was down.
func (l *LinkWatch) up(peer string) { l.upIf(peer, nil) }

// upIf is up, but when only is not nil only while peer's record of being
// down is still only: a connect that succeeded must not clear an outage
// recorded after it began (its link may have gone down again since).
func (l *LinkWatch) upIf(peer string, only *linkDown) {
	l.mu.Lock()
	old := l.down.Load()
	was := old != nil && (*old)[peer] != nil && (only == nil || (*old)[peer] == only)
	if was {
		var m map[string]*linkDown
		if len(*old) > 1 {
			m = make(map[string]*linkDown, len(*old)-1)
			for p, d := range *old {
				if p != peer {
					m[p] = d
				}
			}
			l.down.Store(&m)
		} else {
			l.down.Store(nil)
		}
	}
	l.mu.Unlock()
	if was && l.OnUp != nil {
		l.OnUp()
	}
}

// Down reports whether peer's link is down, and then starts an attempt
// to connect to it unless one runs (in a goroutine that ends when Connect
// returns); its success marks the link up.
func (l *LinkWatch) Down(peer string) bool {
	m := l.down.Load()
	if m == nil {
		return false
	}
	d := (*m)[peer]
	if d == nil {
		return false
	}
	if l.Connect != nil && d.connecting.CompareAndSwap(false, true) {
		go func() {
			err := l.Connect(peer)
			d.connecting.Store(false)
			if err == nil {
				l.upIf(peer, d)
			}
		}()
	}
	return true
}
