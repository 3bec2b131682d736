package frontendapi

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
)

// errClientGone is why a request's work stops when its client closed the connection.
var errClientGone = errors.New("its caller closed the connection")

// hangupCheck is how often a request that waits on a run looks at its connection.
const hangupCheck = 100 * time.Millisecond

// untilHangup is the request's context, cancelled (cause errClientGone) once its client
// has closed the connection: fasthttp tells a handler nothing of it, so a run queued for
// a process would otherwise keep its place, and run, for a caller who left. stop must be
// called before the handler returns (the connection is the server's again after it).
func untilHangup(c *fiber.Ctx) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(c.UserContext())
	conn := c.Context().Conn()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(hangupCheck)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				if hungUp(conn) {
					cancel(errClientGone)
					return
				}
			}
		}
	})
	return ctx, func() {
		close(done)
		wg.Wait()
		cancel(nil)
	}
}
