package sandchat_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/sandchat/sandchat"
)

// TestRedisError: an unreachable Redis is EUNAVAILABLE naming it, with Retry-After and
// the driver error still in the chain. Postgres errors are translated beside the
// stores (migrations/pgdb, TestPgError).
func TestRedisError(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name      string
		err       error
		code, dep string
	}{
		{"redis refused", refused, sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"redis pool timeout", errors.New("redis: connection pool timeout"), sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"redis cancelled stays as is", context.Canceled, sandchat.EINTERNAL, ""},
		{"cluster down during a failover", errors.New("CLUSTERDOWN The cluster is down"), sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"slot migrating", errors.New("TRYAGAIN Multiple keys request during rehashing of slot"), sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"dataset loading", errors.New("LOADING Redis is loading the dataset in memory"), sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"replica's master down", errors.New("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"write to a demoted master", fmt.Errorf("save: %w", errors.New("READONLY You can't write against a read only replica.")), sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"joined with another error", errors.Join(errors.New("pipeline"), errors.New("CLUSTERDOWN Hash slot not served")), sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"a script's own error is no outage", errors.New("ERR Error running script: bad argument"), sandchat.EINTERNAL, ""},
		{"a word inside a message is no code", errors.New("ERR user script said LOADING"), sandchat.EINTERNAL, ""},
		{"app error passes", sandchat.Errorf(sandchat.EBUSY, "busy"), sandchat.EBUSY, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := sandchat.RedisError(tc.err)
			if c := sandchat.ErrorCode(got); c != tc.code {
				t.Fatalf("code %s, want %s (%v)", c, tc.code, got)
			}
			var ae *sandchat.Error
			errors.As(got, &ae)
			if tc.code == sandchat.EUNAVAILABLE && (ae.Dependency != tc.dep || ae.RetryAfter == 0) {
				t.Fatalf("unavailable %+v, want dependency %s and Retry-After", ae, tc.dep)
			}
			if tc.code == sandchat.EUNAVAILABLE && !errors.Is(got, tc.err) {
				t.Fatalf("the driver error left the chain: %v", got)
			}
		})
	}
}

// TestIsConnError: a failure to reach a server is one; a file's error, which is a
// syscall.Errno and so a net.Error too, is not.
func TestIsConnError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("write: %w", syscall.ECONNRESET), true},
		{syscall.EPIPE, true},
		{&os.PathError{Op: "open", Path: "/tmp/x", Err: syscall.ENOENT}, false},
		{&os.PathError{Op: "mkdir", Path: "/tmp/x", Err: syscall.EACCES}, false},
		{syscall.EROFS, false},
	} {
		if got := sandchat.IsConnError(tc.err); got != tc.want {
			t.Errorf("IsConnError(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
