// Package testenv gives each test its own migrated Postgres schema and its own Redis key
// prefix on the real local servers, and removes both when the test ends. A server that
// cannot be reached fails the test with the command that starts it: tests never skip.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/sandchat/sandchat/migrations"
)

// DefaultDatabaseURL and DefaultRedisURL are used when TEST_DATABASE_URL and
// TEST_REDIS_URL are unset.
const (
	DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/sandchat_test?sslmode=disable"
	DefaultRedisURL    = "redis://127.0.0.1:6379/0"
)

const startHint = "start the local services with `make services` (see README)"

// Name returns a short random name usable as a schema or key prefix.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// BaseURL is the database tests use: TEST_DATABASE_URL, else DefaultDatabaseURL.
func BaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultDatabaseURL
}

// DatabaseURL creates a fresh schema, migrates it and returns a URL whose connections
// use it as their search_path. The schema is dropped when the test ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	base := BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.EnsureDatabase(ctx, base); err != nil {
		t.Fatalf("postgres at %s is not reachable (%v): %s", redact(base), err, startHint)
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("postgres at %s is not reachable (%v): %s", redact(base), err, startHint)
	}
	defer conn.Close(ctx)
	schema := Name("t_")
	if _, err := conn.Exec(ctx, "create schema "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "drop schema "+schema+" cascade"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("TEST_DATABASE_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	if _, _, err := migrations.Migrate(ctx, u.String()); err != nil {
		t.Fatalf("migrate schema %s: %v", schema, err)
	}
	return u.String()
}

// DB returns a pool on a fresh migrated schema.
func DB(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), DatabaseURL(t))
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// RedisURL returns the Redis server tests use.
func RedisURL() string {
	if u := os.Getenv("TEST_REDIS_URL"); u != "" {
		return u
	}
	return DefaultRedisURL
}

// RedisClient connects to the Redis server tests use, failing the test with how to
// start it when it is unreachable. The caller closes it.
func RedisClient(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL())
	if err != nil {
		t.Fatalf("TEST_REDIS_URL: %v", err)
	}
	rdb := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		_ = rdb.Close()
		t.Fatalf("redis at %s is not reachable (%v): %s", opts.Addr, err, startHint)
	}
	return rdb
}

// Redis returns a client and a key prefix of the test's own; keys under the prefix are
// deleted when the test ends.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := RedisClient(t)
	prefix := Name("test:") + ":"
	t.Cleanup(func() {
		DropPrefix(rdb, prefix)
		_ = rdb.Close()
	})
	return rdb, prefix
}

// DropPrefix deletes every key that starts with prefix.
func DropPrefix(rdb redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var keys []string
	_ = scan(ctx, rdb, globEscaper.Replace(prefix)+"*", func(k string) error {
		if keys = append(keys, k); len(keys) == 1000 {
			rdb.Del(ctx, keys...)
			keys = keys[:0]
		}
		return nil
	})
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}

// CopyKeys copies the keys from+pattern (a SCAN glob) to the same names under to,
// replacing what is there.
func CopyKeys(rdb redis.UniversalClient, from, to, pattern string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return scan(ctx, rdb, globEscaper.Replace(from)+pattern, func(k string) error {
		return rdb.Copy(ctx, k, to+strings.TrimPrefix(k, from), 0, true).Err()
	})
}

func scan(ctx context.Context, rdb redis.UniversalClient, pattern string, each func(key string) error) error {
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		if err := each(iter.Val()); err != nil {
			return err
		}
	}
	return iter.Err()
}

// globEscaper makes a prefix match only itself in a SCAN pattern.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Redacted()
}
