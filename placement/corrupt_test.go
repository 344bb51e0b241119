package placement_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.etcd.io/bbolt"

	"github.com/tempest-actors/tempest/placement"
)

// raftWithHistory runs a one-node cluster, commits entries before and
// after a snapshot, closes it and returns its data dir and the last
// index it had acknowledged.
func raftWithHistory(t *testing.T) (dir string, last uint64) {
	t.Helper()
	c := newTestCluster(t, 1)
	n := c.start("a")
	waitFor(t, 30*time.Second, "settled", func() bool { return c.settled("a") })
	ctx := context.Background()
	propose := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := n.Propose(ctx, placement.Command{Op: placement.OpSync, Name: "a", Nonce: fmt.Sprint("s", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	propose(0, 20)
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	propose(20, 40)
	// The node's own loop may still append (a sync barrier after a lease
	// lapse, say): what it logged until it stopped is what must reopen.
	c.stop("a", placement.PeerFailed)
	return c.dirs["a"], n.Raft().LastIndex()
}

// reopen opens the node on dir again the way a restart does, and closes
// it if that worked.
func reopen(t *testing.T, dir string) error {
	t.Helper()
	cfg := testConfig()
	cfg.Name, cfg.DataDir = "a", dir
	_, cfg.Transport = raft.NewInmemTransport("a")
	cfg.Membership = newFakeMembership()
	n, err := placement.New(cfg)
	if err != nil {
		return err
	}
	return errors.Join(errors.New("opened"), n.Close(context.Background()))
}

func scribble(t *testing.T, path string, off int64) {
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
	r := rand.New(rand.NewPCG(1, 2))
	for i := range junk {
		junk[i] = byte(r.Uint32())
	}
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

func wantCorrupt(t *testing.T, err error, file string) {
	t.Helper()
	t.Log(err)
	if !errors.Is(err, placement.ErrCorrupt) {
		t.Fatalf("reopen: %v, want ErrCorrupt", err)
	}
	var ce *placement.CorruptError
	if !errors.As(err, &ce) || ce.Path != file {
		t.Fatalf("reopen: %v, want a CorruptError naming %s", err, file)
	}
}

func TestSnapshotMetaGarbageIsCorrupt(t *testing.T) {
	dir, _ := raftWithHistory(t)
	metas, err := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*", "meta.json"))
	if err != nil || len(metas) == 0 {
		t.Fatalf("no snapshot meta: %v", err)
	}
	if err := os.WriteFile(metas[len(metas)-1], []byte("\x00garbage{{"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, reopen(t, dir), metas[len(metas)-1])
}

func TestWALSegmentGarbageIsCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  int64
	}{{"whole file", 0}, {"after the file header", 64}, {"from 4 KiB", 4096}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := raftWithHistory(t)
			seg := lastSegment(t, dir)
			scribble(t, seg, tc.off)
			wantCorrupt(t, reopen(t, dir), seg)
		})
	}
}

// Garbage in the unwritten end of the preallocated tail segment is no
// damage to anything acknowledged: the node opens with its whole log.
func TestWALGarbageBeyondTheLogOpens(t *testing.T) {
	dir, last := raftWithHistory(t)
	seg := lastSegment(t, dir)
	fi, err := os.Stat(seg)
	if err != nil {
		t.Fatal(err)
	}
	scribble(t, seg, fi.Size()-4096)
	cfg := testConfig()
	cfg.Name, cfg.DataDir = "a", dir
	_, cfg.Transport = raft.NewInmemTransport("a")
	cfg.Membership = newFakeMembership()
	n, err := placement.New(cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer n.Close(context.Background())
	if got := n.Raft().LastIndex(); got != last {
		t.Fatalf("last index %d after reopen, want %d", got, last)
	}
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "raft", "wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no WAL segment: %v", err)
	}
	return segs[len(segs)-1]
}

// A snapshot whose state no longer matches the checksum in its metadata
// (bytes changed on disk) is refused at open, naming state.bin.
func TestSnapshotStateGarbageIsCorrupt(t *testing.T) {
	dir, _ := raftWithHistory(t)
	states, err := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*", "state.bin"))
	if err != nil || len(states) == 0 {
		t.Fatalf("no snapshot state: %v", err)
	}
	scribble(t, states[len(states)-1], 0)
	wantCorrupt(t, reopen(t, dir), states[len(states)-1])
}

// A removed or emptied log.mark does not let a damaged log through: a
// node with raft state must have a valid mark, so the overwritten
// segment is refused as it is with the mark in place.
func TestLogMarkMissingWithRaftStateIsCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(path string) error
	}{
		{"removed", os.Remove},
		{"emptied", func(p string) error { return os.Truncate(p, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := raftWithHistory(t)
			scribble(t, lastSegment(t, dir), 0)
			mark := filepath.Join(dir, "raft", "log.mark")
			if err := tc.damage(mark); err != nil {
				t.Fatal(err)
			}
			wantCorrupt(t, reopen(t, dir), mark)
			// Refused again on the next try: the check did not create
			// (or fill) the mark on its way out.
			wantCorrupt(t, reopen(t, dir), mark)
		})
		t.Run(tc.name+" with the log whole", func(t *testing.T) {
			dir, _ := raftWithHistory(t)
			mark := filepath.Join(dir, "raft", "log.mark")
			if err := tc.damage(mark); err != nil {
				t.Fatal(err)
			}
			wantCorrupt(t, reopen(t, dir), mark)
		})
	}
}

// A fresh data directory opens and writes its first mark at once, so a
// node that stops after hearing a term but before its first append is
// not taken for one whose mark was removed.
func TestFreshDataDirWritesTheMark(t *testing.T) {
	dir := t.TempDir()
	if err := reopen(t, dir); !containsOpened(err) {
		t.Fatalf("fresh dir: %v", err)
	}
	fi, err := os.Stat(filepath.Join(dir, "raft", "log.mark"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() == 0 {
		t.Fatal("log.mark is empty after the first open")
	}
	if err := reopen(t, dir); !containsOpened(err) {
		t.Fatalf("second open: %v", err)
	}
}

func containsOpened(err error) bool {
	return err != nil && !errors.Is(err, placement.ErrCorrupt) && strings.HasPrefix(err.Error(), "opened")
}

// Damage to the raft log's metadata database is a CorruptError naming
// it (exit 10 and a remedy in the agent), not a bare open error or a
// panic.
func TestWALMetaDamageIsCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, p string) { scribble(t, p, 0) }},
		{"garbage after the meta pages", func(t *testing.T, p string) { scribble(t, p, 8192) }},
		{"cut to one page", func(t *testing.T, p string) {
			if err := os.Truncate(p, 4096); err != nil {
				t.Fatal(err)
			}
		}},
		{"cut to nothing", func(t *testing.T, p string) {
			if err := os.Truncate(p, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"garbage in the free list", func(t *testing.T, p string) {
			scribblePage(t, p, boltFreelistPage(t, p))
		}},
		{"a free list naming a page in use", func(t *testing.T, p string) {
			freeAPageInUse(t, p)
		}},
		{"a database without its buckets", func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			db, err := bbolt.Open(p, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := raftWithHistory(t)
			p := filepath.Join(dir, "raft", "wal", "wal-meta.db")
			tc.damage(t, p)
			wantCorrupt(t, reopen(t, dir), p)
		})
	}
}

// boltFreelistPage reads the newer of a bbolt file's two meta pages and
// returns the page its free list is on.
func boltFreelistPage(t *testing.T, path string) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A meta page: a 16-byte page header, then magic, version, page size
	// and flags (4 bytes each), the root bucket (16), the free list's page
	// id, the high water mark and the transaction id (8 each).
	var page, txid uint64
	for _, m := range []int{0, os.Getpagesize()} {
		meta := b[m+16:]
		tx := binary.NativeEndian.Uint64(meta[48:])
		if tx >= txid {
			txid, page = tx, binary.NativeEndian.Uint64(meta[32:])
		}
	}
	return int64(page)
}

// freeAPageInUse rewrites a bbolt file's free list to name the page its
// root bucket is on, as a torn or misdirected write could.
func freeAPageInUse(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	ne := binary.NativeEndian
	var root, free, txid uint64
	for _, m := range []int{0, ps} {
		meta := b[m+16:]
		if tx := ne.Uint64(meta[48:]); tx >= txid {
			txid = tx
			root, free = ne.Uint64(meta[16:]), ne.Uint64(meta[32:])
		}
	}
	// A free-list page: id, flags (0x10), count, overflow, then the ids.
	page := make([]byte, ps)
	ne.PutUint64(page, free)
	ne.PutUint16(page[8:], 0x10)
	ne.PutUint16(page[10:], 1)
	ne.PutUint64(page[16:], root)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(page, int64(free)*int64(ps)); err != nil {
		t.Fatal(err)
	}
}

// scribblePage overwrites one 4 KiB page of path with garbage.
func scribblePage(t *testing.T, path string, page int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps := int64(os.Getpagesize())
	junk := make([]byte, ps)
	r := rand.New(rand.NewPCG(3, uint64(page)))
	for i := range junk {
		junk[i] = byte(r.Uint32())
	}
	if _, err := f.WriteAt(junk, page*ps); err != nil {
		t.Fatal(err)
	}
}

// A snapshot directory that cannot be read as one is damage naming it.
func TestSnapshotDirDamageIsCorrupt(t *testing.T) {
	dir, _ := raftWithHistory(t)
	p := filepath.Join(dir, "raft", "snapshots")
	if err := os.RemoveAll(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, reopen(t, dir), p)
}

// TestRaftDirRemovedAloneIsCorrupt: a node whose raft/ directory was
// removed while the rest of its data directory stayed (its state store)
// must not come back under its old name with an empty raft log: it
// forgot the entries it acknowledged as a voter. raft.member, beside
// raft/, says the directory held raft state.
func TestRaftDirRemovedAloneIsCorrupt(t *testing.T) {
	dir, _ := raftWithHistory(t)
	if b, err := os.ReadFile(filepath.Join(dir, "raft.member")); err != nil || strings.TrimSpace(string(b)) != "a" {
		t.Fatalf("raft.member: %q, %v; want the node's name", b, err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "raft")); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, reopen(t, dir), filepath.Join(dir, "raft"))
	if _, err := os.Stat(filepath.Join(dir, "raft")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused start created raft/: %v", err)
	}
	// Emptied rather than removed.
	if err := os.MkdirAll(filepath.Join(dir, "raft", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	wantCorrupt(t, reopen(t, dir), filepath.Join(dir, "raft"))
	// Without the marker too (a data directory moved aside whole) the
	// directory is a new node's.
	if err := os.Remove(filepath.Join(dir, "raft.member")); err != nil {
		t.Fatal(err)
	}
	if err := reopen(t, dir); !containsOpened(err) {
		t.Fatalf("an empty data directory: %v, want it opened", err)
	}
}

// A data directory that held another node's raft state is refused
// (swapped data directories, a mistyped name): started under another
// name, the node would vote with the other's term and vote and serve its
// state at rest. A raft.member that holds no node name is damage.
func TestOtherNodesDataDirIsRefused(t *testing.T) {
	dir, _ := raftWithHistory(t) // node "a"
	cfg := testConfig()
	cfg.Name, cfg.DataDir = "b", dir
	_, cfg.Transport = raft.NewInmemTransport("b")
	cfg.Membership = newFakeMembership()
	n, err := placement.New(cfg)
	if err == nil {
		_ = n.Close(context.Background())
		t.Fatal("node b opened node a's data directory")
	}
	t.Log(err)
	if !errors.Is(err, placement.ErrOtherNodesData) || errors.Is(err, placement.ErrCorrupt) {
		t.Fatalf("open as b: %v, want ErrOtherNodesData and no ErrCorrupt", err)
	}
	if err := placement.CheckDataDir(dir, "a"); err != nil {
		t.Fatalf("CheckDataDir as a: %v", err)
	}
	if err := placement.CheckDataDir(t.TempDir(), "b"); err != nil {
		t.Fatalf("CheckDataDir of an empty directory: %v", err)
	}
	p := filepath.Join(dir, placement.MemberFile)
	for _, bad := range []string{"", "a", "a\nb\n", "\n", "a\x00\n", "\xff\n", strings.Repeat("a", 2000) + "\n"} {
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		wantCorrupt(t, placement.CheckDataDir(dir, "a"), p)
		wantCorrupt(t, reopen(t, dir), p)
	}
}

// raft/wal removed alone (raft/log.mark kept) is named as such, not
// blamed on the segment this start created in its place.
func TestWALDirRemovedIsCorrupt(t *testing.T) {
	dir, _ := raftWithHistory(t)
	wal := filepath.Join(dir, "raft", "wal")
	if err := os.RemoveAll(wal); err != nil {
		t.Fatal(err)
	}
	err := reopen(t, dir)
	wantCorrupt(t, err, wal)
	if !strings.Contains(err.Error(), "holds no entry") {
		t.Fatalf("reopen: %v, want it to say the log holds no entry", err)
	}
}

// A data directory whose raft.member was removed while raft/ kept its
// state cannot say whose state that is: started under any name, the
// node would vote with that state's term and vote. It is refused naming
// raft.member, under the old name and any other, and the refused start
// keeps the directory's data ID (a new one would have the cluster take
// the node for one that lost its data once raft.member is put back).
// raft/ holding no raft state (a first start that stopped before it
// wrote raft.member) is still a new node's.
func TestMemberFileRemovedIsRefused(t *testing.T) {
	dir, _ := raftWithHistory(t) // node "a"
	member := filepath.Join(dir, placement.MemberFile)
	id, err := placement.LoadDataID(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(member); err != nil {
		t.Fatal(err)
	}
	if again, err := placement.LoadDataID(dir); err != nil || again != id {
		t.Fatalf("data ID with raft state and no raft.member: %q, %v; want %q kept", again, err, id)
	}
	wantCorrupt(t, reopen(t, dir), member)
	cfg := testConfig()
	cfg.Name, cfg.DataDir = "b", dir
	_, cfg.Transport = raft.NewInmemTransport("b")
	cfg.Membership = newFakeMembership()
	if n, err := placement.New(cfg); err == nil {
		_ = n.Close(context.Background())
		t.Fatal("node b opened node a's raft state without raft.member")
	} else {
		wantCorrupt(t, err, member)
	}
	if _, err := os.Stat(member); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused start wrote raft.member: %v", err)
	}
	// Put back, the directory opens as a's again.
	if err := os.WriteFile(member, []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := reopen(t, dir); !containsOpened(err) {
		t.Fatalf("raft.member put back: %v, want it opened", err)
	}

	fresh := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fresh, "raft", "wal"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := reopen(t, fresh); !containsOpened(err) {
		t.Fatalf("raft/ without raft state and no raft.member: %v, want it opened", err)
	}
}
