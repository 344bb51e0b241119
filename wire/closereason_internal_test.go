package wire

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/quic-go/quic-go"
)

// The end of a link is told in words in the errors of the asks it fails,
// whichever side closed it and why; quic-go's own text follows.
func TestCloseReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&quic.ApplicationError{ErrorCode: closeDisconnect}, "this node dropped the link"},
		{&quic.ApplicationError{Remote: true, ErrorCode: closeDisconnect}, "the peer dropped the link"},
		{fmt.Errorf("wrapped: %w", &quic.ApplicationError{Remote: true, ErrorCode: closeShutdown}), "the peer is shutting down"},
		{&quic.ApplicationError{ErrorCode: closeShutdown}, "this node is shutting down"},
		{&quic.ApplicationError{ErrorCode: closeReplaced}, "replaced"},
		{&quic.IdleTimeoutError{}, "idle timeout"},
		{errors.New("something else"), "connection closed"},
	} {
		if got := closeReason(tc.err); !strings.Contains(got, tc.want) {
			t.Errorf("closeReason(%v) = %q, want it to say %q", tc.err, got, tc.want)
		}
	}
}
