package placement

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tempest-actors/tempest/internal/ratelog"
)

// A node's data directory has an identity of its own, the data ID: random,
// written into the directory at its first start, gossiped with the node
// (Peer.DataID) and recorded in the table by the leader (NodeInfo.DataID,
// OpDataID). Raft knows a server only by its name, so a node that lost
// its data directory and came back under its old name would be taken for
// the voter it was, having forgotten the entries it acknowledged: its
// vote could elect a leader without entries the cluster committed. The
// data ID tells the two apart:
//
//   - every raft stream a node opens says which data ID it expects at the
//     other end (the one its applied table records for that name), and a
//     node refuses a stream meant for another data ID than its own
//     (GuardStreamLayer): the cluster's votes and appends never reach the
//     emptied node as if it were the old one;
//   - the leader removes a voter whose gossiped data ID is not the
//     recorded one, then records the new one and adds the node back as a
//     new server that catches up from the log before it is promoted
//     (PlanVoters).
//
// A data ID is recorded when the node enters the raft configuration, and
// for voters that have none recorded (a cluster just bootstrapped, or
// upgraded from a version without data IDs) as soon as the leader sees
// theirs: a node emptied before that is not told apart.

// lostData reports whether a node gossiping the data ID gossiped, where
// recorded is recorded, lost the data directory it had.
func lostData(recorded, gossiped string) bool {
	return recorded != "" && gossiped != "" && gossiped != recorded
}

// DataIDFile, in the data directory, holds its data ID.
const DataIDFile = "raft.id"

// LoadDataID returns the data ID of the data directory dir, creating and
// durably writing a new one if the directory has none or holds no raft
// state (neither raft.member nor a file under raft/: a new or emptied
// directory, or raft state reset as docs/placement.md describes). A file
// that does not hold one is a *CorruptError: remove it and the node is
// taken for a new one (the cluster re-adds it). A raft/ left without
// raft.member keeps its data ID: New refuses it, or finds it holds no
// raft state yet.
func LoadDataID(dir string) (string, error) {
	path := filepath.Join(dir, DataIDFile)
	if err := notAFile(path); err != nil {
		return "", err
	}
	_, err := os.Stat(filepath.Join(dir, MemberFile))
	held := err == nil || holdsFiles(filepath.Join(dir, "raft"))
	var b []byte
	if held {
		b, err = os.ReadFile(path)
	}
	switch {
	case !held:
	case err == nil:
		id := strings.TrimSuffix(string(b), "\n")
		if raw, derr := hex.DecodeString(id); derr != nil || len(raw) != 16 {
			return "", &CorruptError{Path: path, Err: errors.New("it does not hold a data ID (32 hex digits); remove it and the node rejoins as a new one")}
		}
		return id, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("placement: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("placement: %w", err)
	}
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", fmt.Errorf("placement: data ID: %w", err)
	}
	id := hex.EncodeToString(raw[:])
	tmp := path + ".tmp"
	err = os.WriteFile(tmp, []byte(id+"\n"), 0o600)
	if err == nil {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("placement: write %s: %w", path, err)
	}
	return id, nil
}

func syncFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// streamPreamble starts a raft stream that names the data ID it is meant
// for. No raft message starts with this byte (raft's RPC types are small
// numbers), so a stream from a node that sends no preamble still reads.
const streamPreamble = 0xd7

// ErrWrongDataID is what reading a raft stream meant for another data
// directory than this node's returns; the stream is closed.
var ErrWrongDataID = errors.New("placement: raft stream meant for another data directory of this node")

// GuardStreamLayer wraps a raft stream layer so that streams carry the
// data ID they are meant for (see LoadDataID): a stream it dials to a
// peer starts with expect(peer) when that is not empty, and a stream it
// accepts that names another data ID than self is closed with
// ErrWrongDataID on its first read (logged to log, once a minute at
// most). A stream without the preamble (a peer whose table records no
// data ID for this node, or built before data IDs) is read as it is.
func GuardStreamLayer(sl raft.StreamLayer, self string, expect func(peer string) string, log *slog.Logger) raft.StreamLayer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &guardLayer{StreamLayer: sl, self: self, expect: expect,
		refused: ratelog.New(log, slog.LevelWarn,
			"placement: raft stream meant for another data directory of this node refused; the leader re-adds this node as a new server",
			time.Minute, time.Now)}
}

type guardLayer struct {
	raft.StreamLayer
	self    string
	expect  func(peer string) string
	refused *ratelog.Limiter
}

func (g *guardLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	conn, err := g.StreamLayer.Dial(address, timeout)
	if err != nil {
		return nil, err
	}
	id := g.expect(string(address))
	if id == "" {
		return conn, nil
	}
	b := []byte{streamPreamble}
	b = binary.AppendUvarint(b, uint64(len(id)))
	b = append(b, id...)
	if timeout > 0 {
		_ = conn.SetWriteDeadline(time.Now().Add(timeout))
	}
	_, err = conn.Write(b)
	_ = conn.SetWriteDeadline(time.Time{})
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	return conn, nil
}

func (g *guardLayer) abortDialed() {
	if a, ok := g.StreamLayer.(dialAborter); ok {
		a.abortDialed()
	}
}

func (g *guardLayer) Accept() (net.Conn, error) {
	conn, err := g.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return &guardConn{Conn: conn, g: g}, nil
}

// maxDataIDLen bounds the data ID a preamble may carry.
const maxDataIDLen = 64

// guardConn checks an accepted stream's preamble on its first read
// (raft reads each stream on a goroutine of its own, so Accept never
// waits for a peer's bytes).
type guardConn struct {
	net.Conn
	g    *guardLayer
	once sync.Once
	r    *bufio.Reader
	err  error
}

func (c *guardConn) Read(p []byte) (int, error) {
	c.once.Do(c.check)
	if c.err != nil {
		return 0, c.err
	}
	return c.r.Read(p)
}

func (c *guardConn) check() {
	c.r = bufio.NewReaderSize(c.Conn, 64)
	b, err := c.r.Peek(1)
	if err != nil || b[0] != streamPreamble {
		return // the reader reports err itself
	}
	_, _ = c.r.ReadByte()
	n, err := binary.ReadUvarint(c.r)
	if err == nil && n > maxDataIDLen {
		err = fmt.Errorf("placement: raft stream preamble names a data ID of %d bytes", n)
	}
	var id []byte
	if err == nil {
		id = make([]byte, n)
		_, err = io.ReadFull(c.r, id)
	}
	switch {
	case err != nil:
		c.err = err
	case string(id) != c.g.self:
		c.err = fmt.Errorf("%w: it names %s, this node's is %s", ErrWrongDataID, id, c.g.self)
		c.g.refused.Note(c.Conn.RemoteAddr().String(), slog.String("expected", string(id)), slog.String("data_id", c.g.self))
	}
	if c.err != nil {
		_ = c.Conn.Close()
	}
}
