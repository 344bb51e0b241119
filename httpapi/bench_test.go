package httpapi_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/actor"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
	"github.com/tempest-actors/tempest/prospero"
)

// BenchmarkGateway follows one ask to a standalone node's demo kinds
// through each layer of the operator path, in one run, so that each layer
// reads as its cost over the one below it (x-ask: ns per ask over the
// library ask's):
//
//	ask      (baseline) Node.Ask with the Go value: scheduler and turn only.
//	askjson  Node.AskJSON: the JSON -> BARE -> Go value transcoding and back.
//	handler  the API's handler (auth, body read, routing, metrics) with a
//	         reused request and a discarding response writer, no network.
//	http     POST over loopback HTTP/1.1 with keep-alive from
//	         GOMAXPROCS*4 concurrent clients: what one node serves.
//
// The counter keeps its value in memory only (PersistNone), so that the
// disk's fsync, which bounds the durable counter of `tempest bench`, stays
// out of a path measurement. Reproduce:
//
//	go test -run '^$' -bench Gateway -benchmem ./httpapi/
func BenchmarkGateway(b *testing.B) {
	none := prospero.Persistence{Mode: prospero.PersistNone}
	n, err := tempest.New(tempest.Config{Name: "solo", DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{CounterPersistence: &none}); err != nil {
		b.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close(context.Background()) })
	met := httpapi.NewMetrics("bench")
	met.Attach(n)
	api, err := httpapi.New(httpapi.Config{Node: n, Metrics: met})
	if err != nil {
		b.Fatal(err)
	}
	h := api.Handler()
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)

	ctx := context.Background()
	const keys = 1024
	body := []byte(`{"Add":{"n":1}}`)
	var base float64 // ns per ask of the baseline's last (reported) run
	report := func(b *testing.B, el time.Duration, baseline bool) {
		ns := float64(el.Nanoseconds()) / float64(b.N)
		if baseline {
			base = ns
		}
		b.ReportMetric(ns/base, "x-ask")
	}
	names, paths := make([]string, keys), make([]string, keys)
	for i := range paths {
		names[i] = fmt.Sprintf("bench-%d", i)
		paths[i] = "/v1/actors/counter/" + names[i] + "/ask"
	}

	b.Run("ask", func(b *testing.B) {
		refs := make([]actor.Ref, keys)
		for i := range refs {
			refs[i] = n.Ref(demo.Counter, names[i])
		}
		msg := demo.Add{N: 1}
		b.ReportAllocs()
		start := time.Now()
		for i := range b.N {
			if _, err := n.Ask(ctx, refs[i%keys], msg); err != nil {
				b.Fatal(err)
			}
		}
		report(b, time.Since(start), true)
	})
	b.Run("askjson", func(b *testing.B) {
		b.ReportAllocs()
		start := time.Now()
		for i := range b.N {
			if _, err := n.AskJSON(ctx, demo.Counter, names[i%keys], body); err != nil {
				b.Fatal(err)
			}
		}
		report(b, time.Since(start), false)
	})
	b.Run("handler", func(b *testing.B) {
		// One request per key, built once: what is measured is the
		// handler, not the request's construction.
		reqs := make([]*http.Request, keys)
		for i := range reqs {
			reqs[i] = httptest.NewRequest(http.MethodPost, paths[i], nil)
			reqs[i].Header.Set("Content-Type", "application/json")
		}
		rd := bytes.NewReader(nil)
		w := &discard{h: http.Header{}}
		b.ReportAllocs()
		start := time.Now()
		for i := range b.N {
			r := reqs[i%keys]
			rd.Reset(body)
			r.Body, r.ContentLength = io.NopCloser(rd), int64(len(body))
			w.code = 0
			clear(w.h)
			h.ServeHTTP(w, r)
			if w.code != http.StatusOK {
				b.Fatalf("status %d", w.code)
			}
		}
		report(b, time.Since(start), false)
	})
	b.Run("http", func(b *testing.B) {
		tr := &http.Transport{MaxIdleConnsPerHost: 256}
		defer tr.CloseIdleConnections()
		hc := &http.Client{Transport: tr}
		var next atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(4)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := int(next.Add(1))
				resp, err := hc.Post(srv.URL+paths[i%keys], "application/json", bytes.NewReader(body))
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
		report(b, time.Since(start), false)
	})
}

// discard is a ResponseWriter that keeps only the status.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header { return d.h }
func (d *discard) WriteHeader(code int) {
	if d.code == 0 {
		d.code = code
	}
}

func (d *discard) Write(p []byte) (int, error) {
	if d.code == 0 {
		d.code = http.StatusOK
	}
	return len(p), nil
}
