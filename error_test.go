package sandchat_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sandchat/sandchat"
)

// TestTranslation: driver errors become the application vocabulary at the adapter
// boundary; an unreachable dependency is EUNAVAILABLE naming it, with Retry-After.
func TestTranslation(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	cases := []struct {
		name      string
		err       error
		translate func(error) error
		code, dep string
	}{
		{"no rows", pgx.ErrNoRows, func(e error) error { return sandchat.PgError(e, "Thing") }, sandchat.ENOTFOUND, ""},
		{"unique violation", &pgconn.PgError{Code: "23505"}, func(e error) error { return sandchat.PgError(e, "thing") }, sandchat.ECONFLICT, ""},
		{"NUL in text", &pgconn.PgError{Code: "22P05"}, func(e error) error { return sandchat.PgError(e, "thing") }, sandchat.EINVALID, ""},
		{"postgres shutting down", &pgconn.PgError{Code: "57P01"}, func(e error) error { return sandchat.PgError(e, "") }, sandchat.EUNAVAILABLE, sandchat.DepPostgres},
		{"postgres refused", fmt.Errorf("failed to connect: %w", refused), func(e error) error { return sandchat.PgError(e, "") }, sandchat.EUNAVAILABLE, sandchat.DepPostgres},
		{"postgres connection cut", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), func(e error) error { return sandchat.PgError(e, "") }, sandchat.EUNAVAILABLE, sandchat.DepPostgres},
		{"syntax error stays internal", &pgconn.PgError{Code: "42601"}, func(e error) error { return sandchat.PgError(e, "") }, sandchat.EINTERNAL, ""},
		{"redis refused", refused, sandchat.RedisError, sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"redis pool timeout", errors.New("redis: connection pool timeout"), sandchat.RedisError, sandchat.EUNAVAILABLE, sandchat.DepRedis},
		{"redis cancelled stays as is", context.Canceled, sandchat.RedisError, sandchat.EINTERNAL, ""},
		{"app error passes", sandchat.Errorf(sandchat.EBUSY, "busy"), sandchat.RedisError, sandchat.EBUSY, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.translate(tc.err)
			if c := sandchat.ErrorCode(got); c != tc.code {
				t.Fatalf("code %s, want %s (%v)", c, tc.code, got)
			}
			var ae *sandchat.Error
			errors.As(got, &ae)
			if tc.code == sandchat.EUNAVAILABLE && (ae.Dependency != tc.dep || ae.RetryAfter == 0) {
				t.Fatalf("unavailable %+v, want dependency %s and Retry-After", ae, tc.dep)
			}
			if tc.code == sandchat.EUNAVAILABLE && !errors.Is(got, tc.err) && !errors.Is(got, refused) {
				t.Fatalf("the driver error left the chain: %v", got)
			}
		})
	}
}
