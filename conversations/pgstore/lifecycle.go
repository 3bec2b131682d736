package pgstore

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

// The data of one user as a whole (for an erase or an export) and conversations no one
// used for long (for retention). The lifecycle package drives them.

// selfOrAdmin allows reading a user's data to that user and to administrators.
func selfOrAdmin(ctx context.Context, userID int64) error {
	if sandchat.UserIDFromContext(ctx) == userID {
		return nil
	}
	return sandchat.RequireAdmin(ctx)
}

// OwnedConversations lists every conversation the user owns, oldest first.
func (s *Store) OwnedConversations(ctx context.Context, userID int64) ([]conversations.Conversation, error) {
	if err := selfOrAdmin(ctx, userID); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `select `+convColumns+` from conversations c where c.owner_id = $1 order by c.id`, userID)
	if err != nil {
		return nil, pgdb.PgError(err, "Conversation")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (conversations.Conversation, error) {
		c := conversations.Conversation{Role: sandchat.RoleOwner}
		return c, scanConversation(r, &c)
	})
	return out, pgdb.PgError(err, "Conversation")
}

// MessagesElsewhere lists the messages the user wrote in conversations of others,
// oldest first: theirs to take with them, not the conversations around them.
func (s *Store) MessagesElsewhere(ctx context.Context, userID int64) ([]conversations.Message, error) {
	if err := selfOrAdmin(ctx, userID); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `select `+msgColumns+` from messages
		where user_id = $1 and conversation_id in (select id from conversations where owner_id <> $1) order by id`, userID)
	if err != nil {
		return nil, pgdb.PgError(err, "message")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (conversations.Message, error) { return scanMessage(r) })
	return out, pgdb.PgError(err, "message")
}

// RunningTurnsBy lists the turns the user started that still run, anywhere.
func (s *Store) RunningTurnsBy(ctx context.Context, userID int64) ([]conversations.TurnRef, error) {
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `select conversation_id, id from turns where user_id = $1 and status = 'running' order by id`, userID)
	if err != nil {
		return nil, pgdb.PgError(err, "turn")
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[conversations.TurnRef])
	return out, pgdb.PgError(err, "turn")
}

// EraseAuthor takes what the user wrote out of the conversations of others, in one
// transaction: their messages keep their place but lose their text (ErasedContent)
// and their author, and so do the texts their answers were given (a turn's prompt);
// titles made from their first message are cleared; their uploads are deleted; and the
// replay history of those conversations, whose events carried the text, is dropped
// (a socket that asks for it is told to refetch). Runs they made in those
// conversations stay, as the history of that conversation's Python session (its state
// was built by them and replays them), and lose their author with the account.
// Conversations of their own must be deleted before (with their Python state).
func (s *Store) EraseAuthor(ctx context.Context, userID int64) (conversations.Erased, error) {
	var out conversations.Erased
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return out, err
	}
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `select distinct conversation_id from messages where user_id = $1
			union select distinct conversation_id from files where created_by = $1 and source = 'upload'`, userID)
		if err != nil {
			return err
		}
		convs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		out.Conversations = int64(len(convs))
		if out.Titles, err = clearTitlesBy(ctx, tx, userID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update turns set prompt = $2 where prompt is not null
			and message_id in (select id from messages where user_id = $1 and role = 'user')`, userID, conversations.ErasedContent); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `update messages set content = case when role = 'user' then $2 else content end, user_id = null
			where user_id = $1`, userID, conversations.ErasedContent)
		if err != nil {
			return err
		}
		out.Messages = tag.RowsAffected()
		if tag, err = tx.Exec(ctx, `delete from files where created_by = $1 and source = 'upload'`, userID); err != nil {
			return err
		}
		out.Uploads = tag.RowsAffected()
		_, err = tx.Exec(ctx, `delete from conversation_events where conversation_id = any($1)`, convs)
		return err
	})
	return out, pgdb.PgError(err, "message")
}

// clearTitlesBy clears the title of each conversation named after the user's first
// message (conversations.TitleFrom of any text it had), and counts them. A title
// someone chose stays.
func clearTitlesBy(ctx context.Context, tx pgx.Tx, userID int64) (int64, error) {
	rows, err := tx.Query(ctx, `select c.id, c.title, m.content, coalesce(array_agg(t.prompt) filter (where t.prompt is not null), '{}')
		from conversations c
		join lateral (select id, user_id, content from messages where conversation_id = c.id and role = 'user' order by id limit 1) m on true
		left join turns t on t.message_id = m.id
		where m.user_id = $1 and c.title <> '' group by c.id, c.title, m.content`, userID)
	if err != nil {
		return 0, err
	}
	type first struct {
		ConvID  int64
		Title   string
		Content string
		Prompts []string
	}
	firsts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[first])
	if err != nil {
		return 0, err
	}
	var n int64
	for _, f := range firsts {
		for _, text := range append(f.Prompts, f.Content) {
			if conversations.TitleFrom(text) != f.Title {
				continue
			}
			if _, err := tx.Exec(ctx, `update conversations set title = '' where id = $1`, f.ConvID); err != nil {
				return 0, err
			}
			n++
			break
		}
	}
	return n, nil
}

// idleSince is the condition of a conversation c no one used since $1: nothing written
// to it (messages, events, renames, settings bump updated_at), no run, no upload, and
// no turn running.
const idleSince = `c.updated_at < $1
	and not exists (select 1 from turns t where t.conversation_id = c.id and t.status = 'running')
	and coalesce((select e.created_at from executions e where e.conversation_id = c.id order by e.id desc limit 1), '-infinity') < $1
	and not exists (select 1 from files f where f.conversation_id = c.id and f.created_at >= $1)`

// IdleConversations returns at most limit conversations no one used since cutoff,
// least recently changed first. No permission check: retention runs for the
// deployment, on behalf of each conversation's owner.
func (s *Store) IdleConversations(ctx context.Context, cutoff time.Time, limit int) ([]conversations.Idle, error) {
	rows, err := s.db.Query(ctx, `select c.id, c.owner_id from conversations c where `+idleSince+`
		order by c.updated_at, c.id limit $2`, cutoff, limit)
	if err != nil {
		return nil, pgdb.PgError(err, "Conversation")
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[conversations.Idle])
	return out, pgdb.PgError(err, "Conversation")
}

// DeleteIdleConversation deletes the conversation if it is still idle since cutoff
// (someone may have come back to it since it was found) and reports whether it did.
func (s *Store) DeleteIdleConversation(ctx context.Context, id int64, cutoff time.Time) (bool, error) {
	tag, err := s.db.Exec(ctx, `delete from conversations c where c.id = $2 and `+idleSince, cutoff, id)
	return tag.RowsAffected() == 1, pgdb.PgError(err, "Conversation")
}

// retentionLockSpace is the first key of the retention lock; the second is the schema's
// name, hashed, so deployments sharing one database in schemas of their own each sweep.
const retentionLockSpace int32 = 0x72657465

// TryRetentionLock takes the deployment's retention lock if no node holds it, on a
// connection of its own kept until unlock: one node sweeps at a time, and a node that
// dies lets go of it with its connection.
func (s *Store) TryRetentionLock(ctx context.Context) (unlock func(), ok bool, err error) {
	conn, err := s.db.P.Acquire(ctx)
	if err != nil {
		return nil, false, pgdb.PgError(err, "lock")
	}
	if err := conn.QueryRow(ctx, `select pg_try_advisory_lock($1, hashtext(current_schema()))`, retentionLockSpace).Scan(&ok); err != nil || !ok {
		conn.Release()
		return nil, false, pgdb.PgError(err, "lock")
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `select pg_advisory_unlock($1, hashtext(current_schema()))`, retentionLockSpace); err != nil {
			// A connection whose lock cannot be let go is closed, which lets it go.
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}, true, nil
}
