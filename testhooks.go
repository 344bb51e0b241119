package tempest

import (
	"context"

	"github.com/tempest-actors/tempest/internal/testhooks"
)

func init() {
	testhooks.Halt = func(ctx context.Context, n any) error { return n.(*Node).close(ctx, false) }
	testhooks.Isolate = func(n any) {
		if nd := n.(*Node); nd.cl != nil {
			nd.cl.isolate()
		}
	}
}
