package cluster

import (
	"context"
	"sync"
)

// flights runs one call at a time per key: a call made while another of
// the same key runs waits for it and returns its error instead of
// running too. The zero value is ready.
type flights[K comparable] struct {
	mu  sync.Mutex
	run map[K]*flight
}

type flight struct {
	done chan struct{}
	err  error
}

// do runs f for key, or joins the call of key that runs; ctx bounds only
// the wait of a call that joins.
func (fs *flights[K]) do(ctx context.Context, key K, f func() error) error {
	fs.mu.Lock()
	if fl, ok := fs.run[key]; ok {
		fs.mu.Unlock()
		select {
		case <-fl.done:
			return fl.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fs.run == nil {
		fs.run = map[K]*flight{}
	}
	fl := &flight{done: make(chan struct{})}
	fs.run[key] = fl
	fs.mu.Unlock()
	defer func() {
		fs.mu.Lock()
		delete(fs.run, key)
		fs.mu.Unlock()
		close(fl.done)
	}()
	fl.err = f()
	return fl.err
}
