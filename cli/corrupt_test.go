package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tempest-actors/tempest/prospero"
)

// buildTempest builds the binary into dir.
func buildTempest(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "tempest")
	build := exec.Command("go", "build", "-o", bin, "../cmd/node")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// soloAgent runs one clustered `tempest agent` (it bootstraps alone) on
// a data dir, for tests of what the binary does with its files.
type soloAgent struct {
	t       *testing.T
	bin     string
	dir     string
	http    int
	gossip  int
	quic    int
	dataDir string
}

func newSoloAgent(t *testing.T) *soloAgent {
	dir := t.TempDir()
	a := &soloAgent{t: t, bin: buildTempest(t, dir), dir: dir, http: freePort(t), gossip: freePort(t), quic: freePort(t),
		dataDir: filepath.Join(dir, "n1", "data")}
	a.must("certs", "ca", "--out", filepath.Join(dir, "ca"))
	a.must("certs", "node", "--ca", filepath.Join(dir, "ca"), "--name", "n1", "--out", filepath.Join(dir, "n1"))
	if err := os.WriteFile(filepath.Join(dir, "gossip.key"), []byte(a.must("keygen")), 0o600); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *soloAgent) must(args ...string) string {
	a.t.Helper()
	out, err := exec.Command(a.bin, args...).Output()
	if err != nil {
		a.t.Fatalf("tempest %v: %v", args, err)
	}
	return string(out)
}

func (a *soloAgent) cmd() *exec.Cmd {
	nd := filepath.Join(a.dir, "n1")
	cmd := exec.Command(a.bin, "agent", "--name", "n1", "--data-dir", a.dataDir,
		"--gossip-addr", fmt.Sprintf("127.0.0.1:%d", a.gossip),
		"--quic-addr", fmt.Sprintf("127.0.0.1:%d", a.quic),
		"--http-addr", fmt.Sprintf("127.0.0.1:%d", a.http),
		"--bootstrap-expect", "1",
		"--gossip-key-file", filepath.Join(a.dir, "gossip.key"),
		"--tls-ca", filepath.Join(a.dir, "ca", "ca.pem"),
		"--tls-cert", filepath.Join(nd, "node.pem"),
		"--tls-key", filepath.Join(nd, "node-key.pem"),
		"--timing", "fast", "--shards", "8", "--workers", "2")
	cmd.Env = append(os.Environ(), "TEMPEST_GOSSIP_KEY=", "TEMPEST_ADDR=", "TEMPEST_TOKEN=")
	return cmd
}

// runHealthy starts the agent, waits until it is ready, asks counter/k
// a few times, and stops it with SIGTERM; the agent must exit 0.
func (a *soloAgent) runHealthy() {
	t := a.t
	t.Helper()
	cmd := a.cmd()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	addr := fmt.Sprintf("http://127.0.0.1:%d", a.http)
	waitFor(t, 30*time.Second, "the agent ready", func() bool {
		return exec.Command(a.bin, "health", "--addr", addr).Run() == nil
	})
	for i := range 5 {
		a.must("ask", fmt.Sprintf("counter/k%d", i), `{"Add":{"n":1}}`, "--addr", addr)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent exit: %v\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("agent did not stop\n%s", out.String())
	}
}

// runDamaged starts the agent and returns its exit code and stderr; it
// must exit on its own.
func (a *soloAgent) runDamaged() (int, string) {
	t := a.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := a.cmd()
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the agent did not exit on a damaged data dir\n%s", errOut.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("agent: %v, want an exit code\n%s", err, errOut.String())
	}
	return ee.ExitCode(), errOut.String()
}

func copyStoreFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the data dir aside (and back).
func copyTree(t *testing.T, from, to string) {
	t.Helper()
	if err := os.RemoveAll(to); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
}

func scribbleFile(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, fi.Size()-off)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range junk {
		junk[i] = byte(r.Uint32())
	}
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

// Each damaged file makes the agent exit with the corrupt-data code and a
// message naming the file and what to do: no panic, not the usage code,
// and never a node that starts on what it cannot read.
func TestAgentRefusesDamagedDataDir(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs agents")
	}
	a := newSoloAgent(t)
	a.runHealthy()

	// A copy from before the writes below: a backup.
	older := filepath.Join(a.dir, "older.db")
	copyStoreFile(t, filepath.Join(a.dataDir, "state.db"), older)
	// Enough state at rest that half the file holds some of it.
	s, err := prospero.NewBoltStore(filepath.Join(a.dataDir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]prospero.Identity, 2000)
	for i := range ids {
		ids[i] = prospero.Identity{Kind: "counter", Key: fmt.Sprintf("bulk%05d", i)}
	}
	if err := s.Import(context.Background(), ids, prospero.Record{Incarnation: 1, State: []byte(strings.Repeat("s", 300))}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(a.dir, "good")
	copyTree(t, a.dataDir, good)

	segs, _ := filepath.Glob(filepath.Join(a.dataDir, "raft", "wal", "*.wal"))
	if len(segs) == 0 {
		t.Fatal("no WAL segment")
	}
	for _, tc := range []struct {
		name   string
		damage func() string // returns the file it damaged
		remedy string
	}{
		{"state.db cut to half", func() string {
			p := filepath.Join(a.dataDir, "state.db")
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
			return p
		}, "empty state store"},
		{"garbage in a snapshot's meta.json", func() string {
			d := filepath.Join(a.dataDir, "raft", "snapshots", "2-9-1700000000000")
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(d, "meta.json")
			if err := os.WriteFile(p, []byte("\x7fELF garbage {"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "state.bin"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, "under its name or a new one"},
		{"WAL segment overwritten", func() string {
			scribbleFile(t, segs[len(segs)-1], 64)
			return segs[len(segs)-1]
		}, "under its name or a new one"},
		{"both slots of raft/log.mark overwritten", func() string {
			p := filepath.Join(a.dataDir, "raft", "log.mark")
			scribbleFile(t, p, 0)
			return p
		}, "under its name or a new one"},
		{"WAL segment overwritten and raft/log.mark removed", func() string {
			scribbleFile(t, segs[len(segs)-1], 64)
			p := filepath.Join(a.dataDir, "raft", "log.mark")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "under its name or a new one"},
		{"WAL segment overwritten and raft/log.mark emptied", func() string {
			scribbleFile(t, segs[len(segs)-1], 64)
			p := filepath.Join(a.dataDir, "raft", "log.mark")
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
			return p
		}, "under its name or a new one"},
		{"garbage in raft.id", func() string {
			p := filepath.Join(a.dataDir, "raft.id")
			if err := os.WriteFile(p, []byte("not a data ID\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, "the node gets a new data ID"},
		{"garbage in raft/wal/wal-meta.db", func() string {
			p := filepath.Join(a.dataDir, "raft", "wal", "wal-meta.db")
			scribbleFile(t, p, 0)
			return p
		}, "under its name or a new one"},
		{"state.db replaced by a backup", func() string {
			p := filepath.Join(a.dataDir, "state.db")
			copyStoreFile(t, older, p)
			return p
		}, "state.db.mark and start"},
		{"state.db removed", func() string {
			p := filepath.Join(a.dataDir, "state.db")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "state.db.mark and start"},
		{"raft/wal a file", func() string {
			p := filepath.Join(a.dataDir, "raft", "wal")
			if err := os.RemoveAll(p); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, "under its name or a new one"},
		{"garbage in raft.member", func() string {
			p := filepath.Join(a.dataDir, "raft.member")
			if err := os.WriteFile(p, []byte("\x00\x01two\nlines\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, "write its name and a newline"},
		{"state.db a directory", func() string {
			return replaceByDir(t, filepath.Join(a.dataDir, "state.db"))
		}, "empty state store"},
		{"raft/log.mark a directory", func() string {
			return replaceByDir(t, filepath.Join(a.dataDir, "raft", "log.mark"))
		}, "under its name or a new one"},
		{"raft.id a directory", func() string {
			return replaceByDir(t, filepath.Join(a.dataDir, "raft.id"))
		}, "the node gets a new data ID"},
		{"raft.member removed", func() string {
			p := filepath.Join(a.dataDir, "raft.member")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			return p
		}, "write its name and a newline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			copyTree(t, good, a.dataDir)
			file := tc.damage()
			code, stderr := a.runDamaged()
			if code != exitCorrupt {
				t.Errorf("exit code %d, want %d (corrupt data)", code, exitCorrupt)
			}
			for _, want := range []string{file, "is damaged", "what to do", "backup", tc.remedy} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
			if strings.Contains(stderr, "tempest: tempest:") {
				t.Errorf("stderr repeats the prefix:\n%s", stderr)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Errorf("stderr shows a panic:\n%s", stderr)
			}
		})
	}

	// Another node's data directory (swapped with n1's, or --name
	// mistyped) is no damage: a usage error naming both names.
	t.Run("another node's data directory", func(t *testing.T) {
		copyTree(t, good, a.dataDir)
		if err := os.WriteFile(filepath.Join(a.dataDir, "raft.member"), []byte("n0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		markPath := filepath.Join(a.dataDir, "state.db.mark")
		mark, err := os.ReadFile(markPath)
		if err != nil {
			t.Fatal(err)
		}
		code, stderr := a.runDamaged()
		if code != exitUsage {
			t.Errorf("exit code %d, want %d (usage)", code, exitUsage)
		}
		if after, _ := os.ReadFile(markPath); !bytes.Equal(after, mark) {
			t.Error("the refused start wrote the other node's state.db.mark")
		}
		for _, want := range []string{`node "n0"`, `named "n1"`, "a data directory of its own"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr lacks %q:\n%s", want, stderr)
			}
		}
	})

	// The intact copy still starts and serves.
	copyTree(t, good, a.dataDir)
	a.runHealthy()
}

// state.db cut short under a running agent: the ask that needed it fails
// (503 not_committed or 410, never 200), and the agent stops on its own
// with the corrupt-data code and a message naming the file, instead of
// dying of SIGBUS or serving on without its state.
func TestAgentStopsWhenStateDamagedWhileRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs agents")
	}
	a := newSoloAgent(t)
	cmd := a.cmd()
	var errOut syncBuilder
	cmd.Stdout, cmd.Stderr = &errOut, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	addr := fmt.Sprintf("http://127.0.0.1:%d", a.http)
	waitFor(t, 30*time.Second, "the agent ready", func() bool {
		return exec.Command(a.bin, "health", "--addr", addr).Run() == nil
	})
	for i := range 20 {
		a.must("ask", fmt.Sprintf("counter/k%d", i), `{"Add":{"n":1}}`, "--addr", addr)
	}
	path := filepath.Join(a.dataDir, "state.db")
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(a.bin, "ask", "counter/k1", `{"Add":{"n":1}}`, "--addr", addr).CombinedOutput()
	if err == nil {
		t.Fatalf("an ask after state.db was cut short succeeded: %s", out)
	}
	var ee *exec.ExitError
	select {
	case err := <-done:
		if !errors.As(err, &ee) || ee.ExitCode() != exitCorrupt {
			t.Fatalf("agent exit: %v, want code %d\n%s", err, exitCorrupt, errOut.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent did not stop on a damaged state store\n%s", errOut.String())
	}
	stderr := errOut.String()
	for _, want := range []string{path, "is damaged", "what to do", "backup"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "panic") || strings.Contains(stderr, "SIGBUS") {
		t.Errorf("stderr shows a crash:\n%s", stderr)
	}
}

// A commit that failed after its writes were sent leaves a sound file:
// the remedy is to fix the disk and start again, not to restore or move
// the store aside (which would lose the writes the pending log holds).
func TestCorruptExitOfWritesSentNotCommitted(t *testing.T) {
	err := corruptExit(&prospero.CorruptError{Path: "/data/state.db",
		Err: fmt.Errorf("%w (no space left on device)", prospero.ErrSentNotCommitted)}, "/data")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != exitCorrupt {
		t.Fatalf("exit: %v, want code %d", err, exitCorrupt)
	}
	if msg := err.Error(); !strings.Contains(msg, "/data/state.db.pending") || strings.Contains(msg, "move it aside") {
		t.Fatalf("remedy: %s", msg)
	}
}

// A damaged pending log file (an entry that names no valid identity, or
// the file removed under the running node) is not to be moved aside
// alone: the remedy says so, and names the files that go together.
func TestCorruptExitOfThePendingLog(t *testing.T) {
	for _, path := range []string{"/data/state.db.pending", "/data/state.db.pending.1"} {
		err := corruptExit(&prospero.CorruptError{Path: path, Err: errors.New("a pending write names no valid identity")}, "/data")
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitCorrupt {
			t.Fatalf("%s: exit %v, want code %d", path, err, exitCorrupt)
		}
		msg := err.Error()
		for _, want := range []string{"never move it aside alone", "/data/state.db, /data/state.db.pending and /data/state.db.pending.1 aside together"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: remedy lacks %q: %s", path, want, msg)
			}
		}
		if strings.Contains(msg, "move it aside to start") {
			t.Errorf("%s: remedy tells to move the file aside alone: %s", path, msg)
		}
	}
}

// pendingEntry encodes one entry of a state store's pending log, as
// prospero writes it (prospero/store_pending.go, "Entry layout").
func pendingEntry(seq uint64, kind, key string, version uint64, state []byte) []byte {
	p := binary.BigEndian.AppendUint64(nil, seq)
	p = binary.AppendUvarint(p, uint64(len(kind)))
	p = append(p, kind...)
	p = binary.AppendUvarint(p, uint64(len(key)))
	p = append(p, key...)
	p = binary.BigEndian.AppendUint64(p, version)
	p = binary.AppendUvarint(p, 1) // incarnation
	p = binary.AppendUvarint(p, uint64(len(state)))
	p = append(p, state...)
	b := binary.BigEndian.AppendUint32(nil, uint32(len(p)+4))
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(p, crc32.MakeTable(crc32.Castagnoli)))
	return append(b, p...)
}

// A pending log file holding a write the node cannot give back (its
// identity is not valid) stops the start with the corrupt-data code and
// a remedy that keeps the log's files together; garbage in it (a torn
// write) is skipped and the node starts.
func TestAgentRefusesAPendingLogItCannotWriteBack(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs agents")
	}
	a := newSoloAgent(t)
	a.runHealthy()
	good := filepath.Join(a.dir, "good")
	copyTree(t, a.dataDir, good)

	p := filepath.Join(a.dataDir, "state.db.pending.1")
	if err := os.WriteFile(p, pendingEntry(1, "counter", "\xff\xfe", 5, []byte("x")), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stderr := a.runDamaged()
	if code != exitCorrupt {
		t.Errorf("exit code %d, want %d (corrupt data)", code, exitCorrupt)
	}
	for _, want := range []string{p, "what to do", "never move it aside alone", "aside together"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}

	copyTree(t, good, a.dataDir)
	if err := os.WriteFile(p, []byte("\x00\x00\x00\x30torn write, not an entry"), 0o600); err != nil {
		t.Fatal(err)
	}
	a.runHealthy()
}

// replaceByDir replaces the file at p by a directory of the same name.
func replaceByDir(t *testing.T, p string) string {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}
