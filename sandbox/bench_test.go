package sandbox

import (
	"context"
	"fmt"
	"io"
	"testing"
)

// benchEngine starts a one-host engine under its own prefix, reusing the shared base.
func benchEngine(b *testing.B) *Engine {
	b.Helper()
	rdb := testRedis(b)
	prefix := randomPrefix("bench")
	cleanPrefix(b, rdb, prefix)
	return startEngine(b, pooledConfig(prefix), rdb)
}

func benchRun(b *testing.B, e *Engine, key, code string) Result {
	r, err := e.Execute(context.Background(), key, Request{Code: code})
	if err != nil || r.Status != StatusSuccess {
		b.Fatalf("%v %s %+v", err, r.Status, r.Error)
	}
	return r
}

func BenchmarkWarmRunPersisted(b *testing.B) {
	e := benchEngine(b)
	benchRun(b, e, "w", "x = 0")
	for b.Loop() {
		benchRun(b, e, "w", "x += 1")
	}
}

func BenchmarkNewConversation(b *testing.B) {
	e := benchEngine(b)
	next := freshSessions(b, e, "new")
	for b.Loop() {
		benchRun(b, e, next(), "x = 1")
	}
}

// freshSessions names a new session for each call, after waiting, off the clock, for the
// warm pool to be full and idle: each op then measures a new conversation's start.
func freshSessions(b *testing.B, e *Engine, prefix string) func() string {
	i := 0
	return func() string {
		b.StopTimer()
		defer b.StartTimer()
		if err := waitPool(context.Background(), e); err != nil {
			b.Fatal(err)
		}
		i++
		return fmt.Sprintf("%s:%d", prefix, i)
	}
}

func BenchmarkColdRestore(b *testing.B) {
	e := benchEngine(b)
	benchRun(b, e, "c", "x = 1\ndef f(a):\n    return a + x")
	for b.Loop() {
		b.StopTimer()
		evictLive(b, e, "c")
		b.StartTimer()
		benchRun(b, e, "c", "f(1)")
	}
}

// BenchmarkCrowd is the burst row of `sandchat bench` alone: 100 new conversations, 50
// at a time, each `x = 11`, on an engine configured as the bench's.
func BenchmarkCrowd(b *testing.B) {
	e := defaultsEngine(b, "crowd", func(cfg *Config) {
		cfg.WarmPool, cfg.WarmPoolMax, cfg.MaxLive = max(cfg.WarmPool, 1), max(cfg.WarmPoolMax, burst), max(cfg.MaxLive, 2*burst+4)
	})
	for b.Loop() {
		rows, err := crowdRows(context.Background(), e, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(rows[0].P50, "wall-ms")
	}
}

// defaultsEngine starts an engine with the defaults, as `sandchat bench` does (packages
// from the local mirror only), changed by mutate, under a Redis prefix of its own.
func defaultsEngine(b testing.TB, name string, mutate func(*Config)) *Engine {
	rdb := testRedis(b)
	prefix := randomPrefix(name)
	cleanPrefix(b, rdb, prefix)
	cfg := DefaultConfig()
	cfg.RedisPrefix, cfg.PackageCDN = prefix, CDNOff
	mutate(&cfg)
	return startEngine(b, Locate(cfg), rdb)
}
