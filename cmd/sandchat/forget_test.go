package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDeletedConversationForgetsPython: deleting a conversation deletes its Python
// state at once, in every tier (Redis keys, cold blobs in Postgres, the live process),
// and nothing of another conversation; a member who may not delete it deletes nothing.
func TestDeletedConversationForgetsPython(t *testing.T) {
	t.Parallel()
	env := newEnv(t)
	m := env.sandboxNode()
	alice, _ := m.user(t, "alice", false)
	viewer, viewerID := m.user(t, "viewer", false)
	agent := alice.createAgent(map[string]any{"name": "Coder", "internal_tools": map[string]bool{"pyodide_sandbox": true}})
	gone, kept := alice.createConversation(agent.ID), alice.createConversation(agent.ID)
	alice.must(200, "POST", fmt.Sprintf("/api/v1/conversations/%d/members", gone), map[string]any{"user_id": viewerID, "role": "viewer"}, nil)
	ctx := context.Background()

	keys := func(conv int64) []string {
		ks, err := env.rdb.Keys(ctx, fmt.Sprintf("%ssandbox:{conv:%d}*", env.redisPrefix, conv)).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ks)
		return ks
	}
	blobs := func(conv int64) (n int) {
		if err := m.DB.QueryRow(ctx, `select count(*) from sandbox_blobs where session = $1`,
			fmt.Sprintf("%ssandbox:conv:%d", env.redisPrefix, conv)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// A heap of 1 MiB of random bytes and a file of 200 KiB: both go to the cold tier
	// (the heap once its checkpoint is taken, off the run's path).
	for _, conv := range []int64{gone, kept} {
		for _, code := range []string{"import os\nheap = os.urandom(1 << 20)", "open('big.bin', 'wb').write(os.urandom(200 << 10))"} {
			if r := alice.run(conv, code); r.Status != "success" || strings.Contains(r.Stderr, "not saved") {
				t.Fatalf("run in conversation %d: %+v", conv, r)
			}
		}
		eventually(t, 60*time.Second, "the heap checkpointed to the cold tier", func() bool { return blobs(conv) >= 2 })
	}
	before := keys(gone)
	for _, part := range []string{"state", "cells", "cold", "seen"} {
		if !slices.Contains(before, fmt.Sprintf("%ssandbox:{conv:%d}:%s", env.redisPrefix, gone, part)) {
			t.Fatalf("the session holds no %s key before the delete: %v", part, before)
		}
	}

	viewer.must(403, "DELETE", fmt.Sprintf("/api/v1/conversations/%d", gone), nil, nil)
	if ks := keys(gone); !slices.Contains(ks, fmt.Sprintf("%ssandbox:{conv:%d}:state", env.redisPrefix, gone)) || blobs(gone) < 2 {
		t.Fatalf("a refused delete lost the session's state: keys %v, %d blobs", ks, blobs(gone))
	}

	alice.must(204, "DELETE", fmt.Sprintf("/api/v1/conversations/%d", gone), nil, nil)
	// Synchronous: by the answer, only the marker that refuses late saves is left.
	marker := fmt.Sprintf("%ssandbox:{conv:%d}:gone", env.redisPrefix, gone)
	if ks := keys(gone); len(ks) != 1 || ks[0] != marker {
		t.Fatalf("Redis keys of the deleted conversation's session: %v, want only %s", ks, marker)
	}
	if v, _ := env.rdb.Get(ctx, marker).Result(); v != "1" {
		t.Fatalf("the marker holds %q", v)
	}
	if n := blobs(gone); n != 0 {
		t.Fatalf("%d blobs of the deleted conversation's session are left in Postgres", n)
	}
	if _, err := m.Engine.Inspect(fmt.Sprintf("conv:%d", gone)); err == nil {
		t.Fatal("the deleted conversation's session still has a live process")
	}

	// The other conversation keeps all of it.
	if ks := keys(kept); !slices.Contains(ks, fmt.Sprintf("%ssandbox:{conv:%d}:state", env.redisPrefix, kept)) || blobs(kept) < 2 {
		t.Fatalf("the other conversation lost its state: keys %v, %d blobs", ks, blobs(kept))
	}
	if got := alice.eval(kept, "(len(heap), os.path.getsize('big.bin'))"); got != "(1048576, 204800)" {
		t.Fatalf("the other conversation's session: %s", got)
	}
}
