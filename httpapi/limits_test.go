package httpapi_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tempest "github.com/tempest-actors/tempest"
	"github.com/tempest-actors/tempest/demo"
	"github.com/tempest-actors/tempest/httpapi"
)

// serveAPI runs the API of a standalone demo node on a loopback port the
// way the agent does: HTTPServer on Listener.
func serveAPI(t *testing.T, lim httpapi.Limits) (*httpapi.Server, string) {
	return serveAPIWith(t, lim, nil)
}

// serveAPIWith is serveAPI with wrap(node) as the API's node.
func serveAPIWith(t *testing.T, lim httpapi.Limits, wrap func(*tempest.Node) httpapi.Node) (*httpapi.Server, string) {
	t.Helper()
	n, err := tempest.New(tempest.Config{Name: "n1", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := demo.Register(n, demo.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	var node httpapi.Node = n
	if wrap != nil {
		node = wrap(n)
	}
	api, err := httpapi.New(httpapi.Config{Node: node, Limits: lim, Metrics: httpapi.NewMetrics("test")})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.HTTPServer()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(api.Listener(ln))
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		if err := n.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return api, ln.Addr().String()
}

// fdBudget is how many descriptors the test may open beyond what it has.
func fdBudget(t *testing.T) int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skipf("no RLIMIT_NOFILE: %v", err)
	}
	if rl.Cur < rl.Max { // Go raises it at start-up; make sure
		rl.Cur = rl.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	return int(rl.Cur)
}

// TestHTTPIdleConnectionsLeaveTheAPIAnswering opens 4,000 connections
// from 40 loopback addresses (with TEMPEST_SOAK set: 20,000 from 200,
// held by child processes when the file descriptor limit does not allow
// this one to hold both ends of that many): half of them idle keep-alive
// connections after a /healthz, half silent ones that never send a
// request, every address over the per-client limit and all of them over
// the node limit. The node keeps at most its limits open and still
// answers /healthz and asks from another client at once.
func TestHTTPIdleConnectionsLeaveTheAPIAnswering(t *testing.T) {
	const maxConns, perClient = 1024, 64
	total, clients := 4000, 40
	if os.Getenv("TEMPEST_SOAK") != "" {
		total, clients = 20000, 200
	}
	api, addr := serveAPI(t, httpapi.Limits{MaxConns: maxConns, MaxConnsPerClient: perClient})
	start := time.Now()
	var opened, dialErrs, answered int
	// Both ends of the node's connections are in this process, and the
	// client ends linger until the test ends: when the file descriptor
	// limit does not leave room for all of them, the client ends are held
	// by child processes of this test binary, each within its own limit,
	// so that the node really faces total connections.
	if budget := fdBudget(t) - maxConns - 512; budget < total {
		children := (total + budget - 1) / budget
		t.Logf("RLIMIT_NOFILE allows %d idle connections in one process: dialing %d from %d child processes", budget, total, children)
		for c := range children {
			share := total / children
			o, e, a := dialInChild(t, addr, share, clients, c*share)
			opened, dialErrs, answered = opened+o, dialErrs+e, answered+a
		}
	} else {
		var conns []net.Conn
		conns, dialErrs, answered = dialIdle(addr, 0, total, clients)
		t.Cleanup(func() {
			for _, c := range conns {
				_ = c.Close()
			}
		})
		opened = len(conns)
	}
	conns := make([]struct{}, opened) // for the messages below
	t.Logf("%d connections in %v (%d dial errors, %d keep-alive requests answered)", opened, time.Since(start), dialErrs, answered)
	if dialErrs > total/100 {
		t.Fatalf("%d of %d dials failed", dialErrs, total)
	}
	if answered < total/4 {
		t.Fatalf("only %d of %d keep-alive requests were answered while connecting", answered, total/2)
	}
	st := api.ConnStats()
	if st.Open > maxConns || st.Evicted == 0 {
		t.Fatalf("conn stats %+v: want at most %d open and evictions", st, maxConns)
	}

	// Another client is answered at once, probes and asks alike.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 20 {
		resp, err := hc.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("healthz %d with %d idle connections: %v", i, len(conns), err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("healthz: %d", resp.StatusCode)
		}
		resp, err = hc.Post("http://"+addr+"/v1/actors/counter/c/ask", "application/json", strings.NewReader(`{"Add":{"n":1}}`))
		if err != nil {
			t.Fatalf("ask %d with %d idle connections: %v", i, len(conns), err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf(`{"n":%d}`, i+1); resp.StatusCode != 200 || strings.TrimSpace(string(b)) != want {
			t.Fatalf("ask %d: %d %s, want %s", i, resp.StatusCode, b, want)
		}
	}
	if st := api.ConnStats(); st.Open > maxConns {
		t.Fatalf("%d connections open, over the limit %d", st.Open, maxConns)
	}
}

// dialIdle opens total connections to addr from clients loopback
// addresses (numbered from first): the even ones send a /healthz and
// then stay as idle keep-alive connections, the odd ones never send
// anything. It returns the connections it opened, the dials that failed
// and the requests answered 200.
func dialIdle(addr string, first, total, clients int) (conns []net.Conn, dialErrs, answered int) {
	var mu sync.Mutex
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(2+i%clients))}}
				c, err := d.Dial("tcp", addr)
				if err != nil {
					mu.Lock()
					dialErrs++
					mu.Unlock()
					continue
				}
				ok := false
				if i%2 == 0 { // an idle keep-alive connection
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"); err == nil {
						if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							ok = resp.StatusCode == 200
						}
					}
					_ = c.SetDeadline(time.Time{})
				}
				mu.Lock()
				conns = append(conns, c)
				if ok {
					answered++
				}
				mu.Unlock()
			}
		})
	}
	for i := range total {
		work <- first + i
	}
	close(work)
	wg.Wait()
	return conns, dialErrs, answered
}

// idleDialerEnv makes this test binary a dialer for dialInChild.
const idleDialerEnv = "TEMPEST_TEST_IDLE_DIALER"

// dialInChild runs dialIdle in a child process, which holds the
// connections until the test ends.
func dialInChild(t *testing.T, addr string, total, clients, first int) (opened, dialErrs, answered int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleDialerChild$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %d %d", idleDialerEnv, addr, first, total, clients))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close() // the child closes its connections and exits
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "dialed %d %d %d", &opened, &dialErrs, &answered); err == nil {
			return opened, dialErrs, answered
		}
	}
	t.Fatalf("the dialer child ended without a report: %v", sc.Err())
	return 0, 0, 0
}

// TestIdleDialerChild is the child process of dialInChild; it does
// nothing in a normal run.
func TestIdleDialerChild(t *testing.T) {
	spec := os.Getenv(idleDialerEnv)
	if spec == "" {
		t.Skip("only as the child of TestHTTPIdleConnectionsLeaveTheAPIAnswering")
	}
	var addr string
	var first, total, clients int
	if _, err := fmt.Sscanf(spec, "%s %d %d %d", &addr, &first, &total, &clients); err != nil {
		t.Fatal(err)
	}
	fdBudget(t) // raises the soft limit
	conns, dialErrs, answered := dialIdle(addr, first, total, clients)
	fmt.Printf("dialed %d %d %d\n", len(conns), dialErrs, answered)
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent is done
	for _, c := range conns {
		_ = c.Close()
	}
}

// rawRequest sends head, then body one byte per tick, and returns the
// status line the server answered (or "" if it closed first) and how long
// that took.
func rawRequest(t *testing.T, addr, head, body string, tick time.Duration) (string, time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(c).ReadString('\n')
		answer <- strings.TrimSpace(line)
	}()
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	for i := 0; i < len(body); i++ {
		select {
		case line := <-answer:
			return line, time.Since(start)
		case <-ticker.C:
			if _, err := c.Write([]byte{body[i]}); err != nil {
				return <-answer, time.Since(start)
			}
		}
	}
	return <-answer, time.Since(start)
}

// TestHTTPSlowBodyTimesOut: a body sent one byte every two seconds is
// answered 408 once the body timeout passes, and the connection closed.
func TestHTTPSlowBodyTimesOut(t *testing.T) {
	_, addr := serveAPI(t, httpapi.Limits{BodyTimeout: 500 * time.Millisecond, ReadHeaderTimeout: time.Second})
	body := `{"Add":{"n":1}}`
	head := fmt.Sprintf("POST /v1/actors/counter/slow/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	line, took := rawRequest(t, addr, head, body, 2*time.Second)
	if !strings.Contains(line, " 408 ") {
		t.Fatalf("slow body: status line %q after %v, want 408", line, took)
	}
	if took > 5*time.Second {
		t.Fatalf("slow body answered after %v", took)
	}
	// Headers that trickle in are cut by the header timeout.
	line, took = rawRequest(t, addr, "", "GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n", 2*time.Second)
	if strings.Contains(line, " 200 ") || took > 5*time.Second {
		t.Fatalf("slow headers: %q after %v, want no answer within the header timeout", line, took)
	}
}

// slowNode is a node whose asks take a while, like a busy actor.
type slowNode struct {
	*tempest.Node
	delay time.Duration
}

func (s slowNode) AskJSON(ctx context.Context, kind, key string, js []byte) ([]byte, error) {
	select {
	case <-time.After(s.delay):
		return s.Node.AskJSON(ctx, kind, key, js)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestHTTPBodyTimeoutDoesNotCutLongAsks: the body's read deadline ends
// with the body, so an ask that takes longer than the body timeout is
// answered (a deadline left on the connection would cancel it).
func TestHTTPBodyTimeoutDoesNotCutLongAsks(t *testing.T) {
	_, addr := serveAPIWith(t, httpapi.Limits{BodyTimeout: 100 * time.Millisecond}, func(n *tempest.Node) httpapi.Node {
		return slowNode{Node: n, delay: 600 * time.Millisecond}
	})
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, body := range []string{`{"Add":{"n":1}}`, `{"Get":null}`} {
		resp, err := hc.Post("http://"+addr+"/v1/actors/counter/long/ask", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.TrimSpace(string(b)) != `{"n":1}` {
			t.Fatalf("slow ask %s: %d %s", body, resp.StatusCode, b)
		}
	}
}

// TestHTTPHeaderLimit: headers over Limits.MaxHeaderBytes are refused
// with 431 before any handler.
func TestHTTPHeaderLimit(t *testing.T) {
	_, addr := serveAPI(t, httpapi.Limits{MaxHeaderBytes: 8 << 10})
	big := "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + strings.Repeat("x", 32<<10) + "\r\n\r\n"
	if line, _ := rawRequest(t, addr, big, "", time.Millisecond); !strings.Contains(line, " 431 ") {
		t.Fatalf("oversized headers: %q, want 431", line)
	}
	small := "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Small: " + strings.Repeat("x", 4<<10) + "\r\n\r\n"
	if line, _ := rawRequest(t, addr, small, "", time.Millisecond); !strings.Contains(line, " 200 ") {
		t.Fatalf("headers under the limit: %q, want 200", line)
	}
}
