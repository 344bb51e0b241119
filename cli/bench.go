package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/tempest-actors/tempest/httpapi"
)

func init() { addCommand(newBenchCmd) }

type benchOptions struct {
	duration    time.Duration
	concurrency int
	keys        int
	body        string
	timeout     time.Duration
	seed        uint64
	local       bool
	targets     []string
}

func newBenchCmd() *cobra.Command {
	var f clientFlags
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench [--duration 10s] [--concurrency 64] [--keys 10000] KIND",
		Short: "Load the cluster with asks to KIND and report throughput and latency",
		Long: `Send asks to KIND/bench-0 ... KIND/bench-(keys-1) from --concurrency
concurrent clients for --duration, spread over the HTTP APIs of the node
at --addr, the nodes given with --target and every other member whose
address is verified (it proved its name with a cluster certificate and
its https certificate names it; over plain HTTP no address taken from
gossip is), unless --local; with a live progress line on stderr; then print
throughput, p50/p99/p99.9 latency and error counts by type. The message is
--body, by default one that fits the demo kinds (echo: {"text":"bench"},
counter: {"Add":{"n":1}}, ticker: {"Start":{"periodMs":3600000}}, which
registers an hourly reminder, or replaces the key's; they stay registered
after the run).`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.duration <= 0:
				return configError("duration", "must be positive")
			case o.concurrency < 1 || o.concurrency > 10000:
				return configError("concurrency", "want 1 to 10000")
			case o.keys < 1:
				return configError("keys", "must be positive")
			case o.timeout <= 0 || o.timeout > httpapi.MaxAskTimeout:
				return configError("timeout", "want a positive duration up to %v", httpapi.MaxAskTimeout)
			}
			kind := args[0]
			body := o.body
			if body == "" {
				switch kind {
				case "echo":
					body = `{"text":"bench"}`
				case "counter":
					body = `{"Add":{"n":1}}`
				case "ticker":
					body = `{"Start":{"periodMs":3600000}}`
				default:
					return configError("body", "required for kind %q", kind)
				}
			}
			if !json.Valid([]byte(body)) {
				return withCode(exitBadJSON, fmt.Errorf("--body is not valid JSON"))
			}
			o.body = body
			c, err := f.client(cmd.Flags(), os.Getenv)
			if err != nil {
				return err
			}
			return runBench(cmd.Context(), c, kind, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().DurationVar(&o.duration, "duration", 10*time.Second, "how long to send")
	cmd.Flags().IntVar(&o.concurrency, "concurrency", 64, "concurrent clients")
	cmd.Flags().IntVar(&o.keys, "keys", 10000, "distinct actor keys")
	cmd.Flags().StringVar(&o.body, "body", "", "the message (JSON)")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 5*time.Second, "deadline of each ask")
	cmd.Flags().Uint64Var(&o.seed, "seed", 1, "seed of the key choice")
	cmd.Flags().BoolVar(&o.local, "local", false, "send everything to --addr instead of spreading over the members")
	cmd.Flags().StringSliceVar(&o.targets, "target", nil, "another node's HTTP API to send to, trusted like --addr (repeatable)")
	return cmd
}

// benchResult is what one run measured.
type benchResult struct {
	ok        int
	errors    map[string]int
	latencies []time.Duration // of successful asks
	elapsed   time.Duration
}

func runBench(ctx context.Context, c *apiClient, kind string, o benchOptions, out, progress io.Writer) error {
	targets := []*apiClient{c}
	if !o.local {
		var skipped []string
		var release func()
		var err error
		targets, skipped, release, err = clusterTargets(ctx, c, o.targets)
		defer release()
		if err != nil {
			return err
		}
		noteSkipped(progress, skipped)
	}
	// One pool per target, sized for the run, with the target's own TLS
	// settings (a verified member's names the member).
	for i, t := range targets {
		tr := &http.Transport{MaxIdleConns: o.concurrency * 2, MaxIdleConnsPerHost: o.concurrency, IdleConnTimeout: 30 * time.Second}
		if ht, ok := t.hc.Transport.(*http.Transport); ok {
			tr.TLSClientConfig = ht.TLSClientConfig
		}
		defer tr.CloseIdleConnections()
		targets[i] = &apiClient{base: t.base, token: t.token, hc: &http.Client{Transport: tr}}
	}
	fmt.Fprintf(progress, "bench: %d clients, %d keys of %s, %v, over %d node(s)\n", o.concurrency, o.keys, kind, o.duration, len(targets))

	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var done, failed atomic.Int64
	var mu sync.Mutex
	res := benchResult{errors: map[string]int{}}
	var wg sync.WaitGroup
	start := time.Now()
	q := url.Values{"timeout": {o.timeout.String()}}
	for w := range o.concurrency {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(o.seed, uint64(w)))
			target := targets[w%len(targets)]
			lat := make([]time.Duration, 0, 1024)
			errs := map[string]int{}
			for ctx.Err() == nil {
				key := fmt.Sprintf("bench-%d", rng.IntN(o.keys))
				path := "/v1/actors/" + url.PathEscape(kind) + "/" + key + "/ask"
				t0 := time.Now()
				_, err := target.do(ctx, http.MethodPost, path, q, []byte(o.body))
				if err != nil {
					if ctx.Err() != nil {
						break // the run ended mid-request
					}
					errs[errorType(err)]++
					failed.Add(1)
					continue
				}
				lat = append(lat, time.Since(t0))
				done.Add(1)
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			for k, v := range errs {
				res.errors[k] += v
			}
			mu.Unlock()
		})
	}
	// On a terminal the progress line is rewritten in place; otherwise
	// (a log, CI) one line per second.
	tty := isTerminal(progress)
	stopProgress := make(chan struct{})
	var pwg sync.WaitGroup
	pwg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var last int64
		for {
			select {
			case <-stopProgress:
				return
			case <-tick.C:
			}
			n := done.Load()
			line := fmt.Sprintf("  %5.0fs  %8d ok  %6d errors  %8.0f asks/s", time.Since(start).Seconds(), n, failed.Load(), float64(n-last))
			if tty {
				fmt.Fprint(progress, "\r"+line)
			} else {
				fmt.Fprintln(progress, line)
			}
			last = n
		}
	})
	wg.Wait()
	close(stopProgress)
	pwg.Wait()
	if tty {
		fmt.Fprintln(progress)
	}
	res.elapsed = time.Since(start)
	res.ok = len(res.latencies)
	printBench(out, res)
	if res.ok == 0 {
		return errors.New("bench: no ask succeeded")
	}
	return nil
}

// errorType names an error for the report by its exit code.
func errorType(err error) string {
	switch exitCode(err) {
	case exitUnreachable:
		return "unreachable"
	case exitDeadline:
		return "deadline_exceeded"
	case exitRefused:
		return "refused"
	case exitUnknownKind:
		return "unknown_kind"
	case exitBadJSON:
		return "bad_json"
	case exitUnavailable:
		return "process_unavailable"
	case exitUnauthorized:
		return "unauthorized"
	}
	return "other"
}

// percentile of sorted durations (q in [0,1]), nearest rank.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func printBench(out io.Writer, r benchResult) {
	slices.Sort(r.latencies)
	total := r.ok
	for _, v := range r.errors {
		total += v
	}
	fmt.Fprintf(out, "asks: %d ok, %d errors in %v: %.0f asks/s\n", r.ok, total-r.ok, r.elapsed.Round(time.Millisecond),
		float64(r.ok)/r.elapsed.Seconds())
	fmt.Fprintf(out, "latency: p50 %v  p99 %v  p99.9 %v  max %v\n",
		percentile(r.latencies, 0.5).Round(time.Microsecond), percentile(r.latencies, 0.99).Round(time.Microsecond),
		percentile(r.latencies, 0.999).Round(time.Microsecond), percentile(r.latencies, 1).Round(time.Microsecond))
	if len(r.errors) > 0 {
		keys := make([]string, 0, len(r.errors))
		for k := range r.errors {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s %d", k, r.errors[k])
		}
		fmt.Fprintf(out, "errors: %s\n", strings.Join(parts, ", "))
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
