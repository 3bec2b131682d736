package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/testenv"
)

// lifecycleBundle is a store with alice, who owns a conversation bob edits, and bob,
// who owns one of his own; cli acts as the command line.
type lifecycleBundle struct {
	store           *Store
	alice, bob, cli context.Context
	aliceID, bobID  int64
	shared, bobsOwn int64
}

func setupLifecycle(t *testing.T) lifecycleBundle {
	t.Helper()
	db := testenv.DB(t)
	ctx := context.Background()
	b := lifecycleBundle{store: New(db, time.Hour), cli: sandchat.WithCLI(ctx, "operator")}
	user := func(name string) (context.Context, int64) {
		var id int64
		if err := db.QueryRow(ctx, `insert into users (name) values ($1) returning id`, name).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return sandchat.WithUser(ctx, &sandchat.User{ID: id, Name: name}), id
	}
	b.alice, b.aliceID = user("alice")
	b.bob, b.bobID = user("bob")
	shared, err := b.store.CreateConversation(b.alice, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	b.shared = shared.ID
	if _, err := b.store.SetMember(b.alice, shared.ID, b.bobID, sandchat.RoleEditor); err != nil {
		t.Fatal(err)
	}
	own, err := b.store.CreateConversation(b.bob, nil, "bob's")
	if err != nil {
		t.Fatal(err)
	}
	b.bobsOwn = own.ID
	return b
}

// say stores a user message with its turn, and ends the turn.
func (b lifecycleBundle) say(t *testing.T, as context.Context, conv int64, text string) conversations.Message {
	t.Helper()
	turn, msg, _, err := b.store.StartTurn(as, conv, "node", "owner", text)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.FinishTurn(as, conversations.Fence{TurnID: turn.ID, Owner: "owner"}, conv, conversations.TurnCompleted, "", nil); err != nil {
		t.Fatal(err)
	}
	return msg
}

// TestEraseAuthor: erasing bob's writings takes his words out of alice's conversation
// (his messages keep their place, without text or author; the texts his answers were
// given; the title his first message gave it; the replay history that carried them; his
// uploads there) and leaves alice's words and conversations of his own alone.
func TestEraseAuthor(t *testing.T) {
	t.Parallel()
	b := setupLifecycle(t)
	ctx := context.Background()
	secret := "my card number is 4111 1111 1111 1111"
	first := b.say(t, b.bob, b.shared, secret)
	b.say(t, b.alice, b.shared, "thanks bob")
	if _, _, err := b.store.UploadFile(b.bob, b.shared, "bob.csv", "text/csv", []byte("a,b\n"), conversations.Quota{Limit: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.UploadFile(b.alice, b.shared, "alice.csv", "text/csv", []byte("c,d\n"), conversations.Quota{Limit: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	b.say(t, b.bob, b.bobsOwn, "in my own conversation")
	if conv, _ := b.store.FindConversationByID(b.alice, b.shared); conv.Title != conversations.TitleFrom(secret) {
		t.Fatalf("the conversation was not named after bob's first message: %q", conv.Title)
	}

	if _, err := b.store.EraseAuthor(b.bob, b.bobID); sandchat.ErrorCode(err) != sandchat.EFORBIDDEN {
		t.Fatalf("erase by a user who is no admin: %v", err)
	}
	got, err := b.store.EraseAuthor(b.cli, b.bobID)
	if err != nil {
		t.Fatal(err)
	}
	// bob's own conversation counts too here: the erase deletes it before this step.
	if got.Messages != 2 || got.Uploads != 1 || got.Titles != 1 || got.Conversations != 2 {
		t.Fatalf("erased %+v", got)
	}
	msgs, err := b.store.Messages(b.alice, b.shared)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.ID == first.ID && (m.Content != conversations.ErasedContent || m.UserID != nil) {
			t.Fatalf("bob's message after the erase: %+v", m)
		}
		if m.Role == "user" && m.ID != first.ID && m.Content != "thanks bob" {
			t.Fatalf("alice's message changed: %+v", m)
		}
	}
	var prompts, leaks int
	db := b.store.db
	if err := db.QueryRow(ctx, `select count(*) filter (where prompt = $2), count(*) filter (where prompt like '%4111%')
		from turns where conversation_id = $1`, b.shared, conversations.ErasedContent).Scan(&prompts, &leaks); err != nil {
		t.Fatal(err)
	}
	if prompts != 1 || leaks != 0 {
		t.Fatalf("turn prompts: %d erased, %d still holding bob's words", prompts, leaks)
	}
	if err := db.QueryRow(ctx, `select count(*) from conversation_events where data::text like '%4111%'`).Scan(&leaks); err != nil || leaks != 0 {
		t.Fatalf("%d events still carry bob's words (%v)", leaks, err)
	}
	if _, recovered, err := b.store.EventsSince(b.alice, b.shared, 0, 10); err != nil || recovered {
		t.Fatalf("a replay from the start after the erase: recovered %v %v, want a refetch", recovered, err)
	}
	if conv, _ := b.store.FindConversationByID(b.alice, b.shared); conv.Title != "" {
		t.Fatalf("title %q, want it cleared", conv.Title)
	}
	files, _ := b.store.Files(b.alice, b.shared)
	if len(files) != 1 || files[0].Name != "alice.csv" {
		t.Fatalf("files left: %+v", files)
	}
	own, _ := b.store.Messages(b.bob, b.bobsOwn)
	if len(own) != 1 || own[0].UserID != nil || own[0].Content != conversations.ErasedContent {
		t.Fatalf("bob's own conversation is deleted whole before this step; here it is anonymized like the rest: %+v", own)
	}
}

// TestIdleConversations: a conversation is idle when nothing was written to it, run in
// it or uploaded to it since the cutoff and no turn runs in it; the delete checks that
// again, and one node at a time sweeps each deployment's schema.
func TestIdleConversations(t *testing.T) {
	t.Parallel()
	b := setupLifecycle(t)
	ctx := context.Background()
	db := b.store.db
	old := func(conv int64) {
		t.Helper()
		for _, q := range []string{`update conversations set updated_at = now() - interval '2 hours' where id = $1`,
			`update executions set created_at = now() - interval '2 hours' where conversation_id = $1`,
			`update files set created_at = now() - interval '2 hours' where conversation_id = $1`} {
			if _, err := db.Exec(ctx, q, conv); err != nil {
				t.Fatal(err)
			}
		}
	}
	idle := func() []int64 {
		t.Helper()
		list, err := b.store.IdleConversations(ctx, time.Now().Add(-time.Hour), 10)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, c := range list {
			ids = append(ids, c.ID)
		}
		return ids
	}
	if got := idle(); len(got) != 0 {
		t.Fatalf("fresh conversations found idle: %v", got)
	}
	old(b.shared)
	old(b.bobsOwn)
	if got := idle(); len(got) != 2 {
		t.Fatalf("idle %v, want both", got)
	}

	// A run, an upload and a running turn each keep a conversation.
	ran, _ := b.store.CreateConversation(b.alice, nil, "ran")
	uploaded, _ := b.store.CreateConversation(b.alice, nil, "uploaded")
	running, _ := b.store.CreateConversation(b.alice, nil, "running")
	if _, err := b.store.BeginExecution(b.alice, conversations.Execution{ConversationID: ran.ID, SessionKey: "conv:x", Code: "1"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.UploadFile(b.alice, uploaded.ID, "a.txt", "", []byte("a"), conversations.Quota{Limit: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := b.store.StartTurn(b.alice, running.ID, "node", "owner", "hi"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []int64{ran.ID, uploaded.ID, running.ID} {
		if _, err := db.Exec(ctx, `update conversations set updated_at = now() - interval '2 hours' where id = $1`, c); err != nil {
			t.Fatal(err)
		}
	}
	if got := idle(); len(got) != 2 {
		t.Fatalf("idle %v: a conversation with a recent run, upload or a running turn is not idle", got)
	}

	cutoff := time.Now().Add(-time.Hour)
	b.say(t, b.bob, b.bobsOwn, "back again")
	if gone, err := b.store.DeleteIdleConversation(ctx, b.bobsOwn, cutoff); err != nil || gone {
		t.Fatalf("a conversation used since it was found: deleted %v %v", gone, err)
	}
	if gone, err := b.store.DeleteIdleConversation(ctx, b.shared, cutoff); err != nil || !gone {
		t.Fatalf("an idle conversation: deleted %v %v", gone, err)
	}

	unlock, ok, err := b.store.TryRetentionLock(ctx)
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	if _, ok, err := b.store.TryRetentionLock(ctx); err != nil || ok {
		t.Fatalf("a second node took the held lock: %v %v", ok, err)
	}
	other := New(testenv.DB(t), time.Hour) // another deployment's schema
	if release, ok, err := other.TryRetentionLock(ctx); err != nil || !ok {
		t.Fatalf("another schema's lock: %v %v", ok, err)
	} else {
		release()
	}
	unlock()
	if release, ok, err := b.store.TryRetentionLock(ctx); err != nil || !ok {
		t.Fatalf("the lock after it was let go: %v %v", ok, err)
	} else {
		release()
	}
}
