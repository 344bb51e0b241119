package tempest

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/tempest-actors/tempest/internal/cluster"
	"github.com/tempest-actors/tempest/placement"
	"github.com/tempest-actors/tempest/prospero"
	"github.com/tempest-actors/tempest/prospero/replica"
)

// A write refused because this node's ownership lease lapsed (every raft
// election causes some) is logged as a warning; a store that failed, as
// an error.
func TestStoreErrorLevel(t *testing.T) {
	var buf bytes.Buffer
	n, err := New(Config{Name: "n1", DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	id := prospero.Identity{Kind: "counter", Key: "k"}
	for _, tc := range []struct {
		err   error
		level string
	}{
		{fmt.Errorf("not committed: %w", replica.ErrLeaseLapsed), "level=WARN"},
		{fmt.Errorf("not replicating: %w", placement.ErrLeaseExpired), "level=WARN"},
		{fmt.Errorf("not committed: %w: shard counter/656 owned by %q", cluster.ErrNotReplicating, "n2"), "level=WARN"},
		{errors.New("disk full"), "level=ERROR"},
	} {
		buf.Reset()
		n.emit(prospero.Event{Type: prospero.EventStoreError, ID: id, Err: tc.err})
		if line := buf.String(); !strings.Contains(line, LogStoreError) || !strings.Contains(line, tc.level) {
			t.Errorf("%v logged as %q, want %s", tc.err, line, tc.level)
		}
	}
}
