package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

const msgColumns = `id, conversation_id, turn_id, role, user_id, agent_id, agent_path, content, tool_calls, tool_call_id, answer_turn_id, created_at`

func scanMessage(r pgx.Row) (conversations.Message, error) {
	var m conversations.Message
	var toolCallID *string
	var calls []byte
	err := r.Scan(&m.ID, &m.ConversationID, &m.TurnID, &m.Role, &m.UserID, &m.AgentID, &m.AgentPath, &m.Content, &calls, &toolCallID, &m.AnswerTurnID, &m.CreatedAt)
	if calls != nil {
		m.ToolCalls = calls
	}
	if toolCallID != nil {
		m.ToolCallID = *toolCallID
	}
	if m.AgentPath == nil {
		m.AgentPath = []string{}
	}
	return m, err
}

// withTx runs fn in a transaction and publishes nothing: callers publish the events
// it returns after the commit.
func (s *Store) withTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func eventData(v any) json.RawMessage {
	raw, _ := json.Marshal(v)
	return raw
}

// insertTurn adds a running turn; a conversation with one running already refuses it
// (409, by the unique index on running turns).
func insertTurn(ctx context.Context, tx pgx.Tx, convID int64, nodeID, owner string) (conversations.Turn, error) {
	var turn conversations.Turn
	err := tx.QueryRow(ctx, `insert into turns (conversation_id, user_id, node_id, owner) values ($1, $2, $3, $4)
		returning id, conversation_id, status, created_at`, convID, sandchat.UserIDFromContext(ctx), nodeID, owner).
		Scan(&turn.ID, &turn.ConversationID, &turn.Status, &turn.CreatedAt)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return turn, sandchat.Errorf(sandchat.ECONFLICT, "The assistant is still answering in this conversation; wait for the turn to end or cancel it.")
	}
	return turn, err
}

// StartTurn stores the user's message and a running turn with their events. It needs
// edit access; a conversation with a running turn refuses a second one (409).
func (s *Store) StartTurn(ctx context.Context, convID int64, nodeID, owner, content string) (conversations.Turn, conversations.Message, []conversations.Event, error) {
	var turn conversations.Turn
	var msg conversations.Message
	var evs []conversations.Event
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		if _, err := findConversation(ctx, tx, convID, sandchat.Editors...); err != nil {
			return err
		}
		var err error
		if turn, err = insertTurn(ctx, tx, convID, nodeID, owner); err != nil {
			return err
		}
		msg, err = scanMessage(tx.QueryRow(ctx, `insert into messages (conversation_id, turn_id, role, user_id, content, answer_turn_id)
			values ($1, $2, 'user', $3, $4, $2) returning `+msgColumns, convID, turn.ID, sandchat.UserIDFromContext(ctx), content))
		if err != nil {
			return err
		}
		// The turn is the message's first answer.
		if _, err := tx.Exec(ctx, `update turns set message_id = $2, prompt = $3 where id = $1`, turn.ID, msg.ID, content); err != nil {
			return err
		}
		msg.Versions = []int64{turn.ID}
		// A conversation nobody named is named after its first message.
		if _, err := tx.Exec(ctx, `update conversations set title = $2 where id = $1 and title = ''`, convID, conversations.TitleFrom(content)); err != nil {
			return err
		}
		started, err := AppendEvent(ctx, tx, convID, conversations.EventTurnStarted, nil, eventData(map[string]any{"turn_id": turn.ID, "message_id": msg.ID}))
		if err != nil {
			return err
		}
		created, err := AppendEvent(ctx, tx, convID, conversations.EventMessageCreated, nil, eventData(map[string]any{"message": msg}))
		evs = []conversations.Event{started, created}
		return err
	})
	return turn, msg, evs, err
}

// RetryTurn stores a running turn that answers the conversation's latest user message
// again, with its turn.started event: no message is added. Only the latest message can
// be answered again (409 for an earlier one), with edit access, and not while a turn runs.
// A non-nil content first replaces the message's text, which only its author may do
// (403): the turn, and every later one, sees the new text. The turn is the message's
// new answer version, current from now on (message.updated says so, with the text).
func (s *Store) RetryTurn(ctx context.Context, convID, messageID int64, nodeID, owner string, content *string) (conversations.Turn, []conversations.Event, error) {
	var turn conversations.Turn
	var evs []conversations.Event
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		if _, err := findConversation(ctx, tx, convID, sandchat.Editors...); err != nil {
			return err
		}
		var latest int64
		err := tx.QueryRow(ctx, `select id from messages where conversation_id = $1 and role = 'user' order by id desc limit 1`, convID).Scan(&latest)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && messageID > latest {
			return sandchat.Errorf(sandchat.ENOTFOUND, "Message %d not found in this conversation.", messageID)
		} else if err != nil {
			return err
		}
		if messageID != latest {
			var role string
			err := tx.QueryRow(ctx, `select role from messages where conversation_id = $1 and id = $2`, convID, messageID).Scan(&role)
			if errors.Is(err, pgx.ErrNoRows) || err == nil && role != "user" {
				return sandchat.Errorf(sandchat.ENOTFOUND, "Message %d is not a user message of this conversation.", messageID)
			} else if err != nil {
				return err
			}
			return sandchat.Errorf(sandchat.ECONFLICT, "Only the latest message can be answered again; send this one anew instead.")
		}
		if turn, err = insertTurn(ctx, tx, convID, nodeID, owner); err != nil {
			return err
		}
		started, err := AppendEvent(ctx, tx, convID, conversations.EventTurnStarted, nil, eventData(map[string]any{"turn_id": turn.ID, "message_id": messageID, "retry": true}))
		if err != nil {
			return err
		}
		if content != nil {
			if err := editMessage(ctx, tx, convID, messageID, *content); err != nil {
				return err
			}
		}
		msg, err := scanMessage(tx.QueryRow(ctx, `update messages set answer_turn_id = $3
			where conversation_id = $1 and id = $2 returning `+msgColumns, convID, messageID, turn.ID))
		if err != nil {
			return pgdb.PgError(err, "message")
		}
		if _, err := tx.Exec(ctx, `update turns set message_id = $2, prompt = $3 where id = $1`, turn.ID, messageID, msg.Content); err != nil {
			return err
		}
		if msg.Versions, err = messageVersions(ctx, tx, messageID); err != nil {
			return err
		}
		updated, err := AppendEvent(ctx, tx, convID, conversations.EventMessageUpdated, nil, eventData(map[string]any{"message": msg}))
		evs = []conversations.Event{started, updated}
		return err
	})
	return turn, evs, err
}

// editMessage replaces the text of a user message by its author.
func editMessage(ctx context.Context, tx pgx.Tx, convID, messageID int64, content string) error {
	tag, err := tx.Exec(ctx, `update messages set content = $3 where conversation_id = $1 and id = $2 and role = 'user' and user_id = $4`,
		convID, messageID, content, sandchat.UserIDFromContext(ctx))
	if err != nil {
		return pgdb.PgError(err, "message")
	}
	if tag.RowsAffected() == 0 {
		return sandchat.Errorf(sandchat.EFORBIDDEN, "Only its author can edit a message; ask for it to be answered again instead.")
	}
	return nil
}

// messageVersions are the turns that answered a user message, oldest first.
func messageVersions(ctx context.Context, q pgdb.Querier, messageID int64) ([]int64, error) {
	rows, err := q.Query(ctx, `select id from turns where message_id = $1 order by id`, messageID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// SetAnswer makes one of a user message's answer versions (turnID) the current one: the
// one the page shows and models see from the next turn on; the message's text becomes
// the text that version answered. It needs edit access, and no turn running in the
// conversation (409): the running one was asked with the versions as they were. The
// message, with its versions, comes with a message.updated event.
func (s *Store) SetAnswer(ctx context.Context, convID, messageID, turnID int64) (conversations.Message, conversations.Event, error) {
	var msg conversations.Message
	var ev conversations.Event
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		if _, err := findConversation(ctx, tx, convID, sandchat.Editors...); err != nil {
			return err
		}
		var running bool
		if err := tx.QueryRow(ctx, `select exists (select 1 from turns where conversation_id = $1 and status = 'running')`, convID).Scan(&running); err != nil {
			return err
		}
		if running {
			return sandchat.Errorf(sandchat.ECONFLICT, "The assistant is still answering in this conversation; switch versions once the turn ends.")
		}
		var err error
		msg, err = scanMessage(tx.QueryRow(ctx, `update messages m set answer_turn_id = t.id, content = coalesce(t.prompt, m.content)
			from turns t where m.conversation_id = $1 and m.id = $2 and m.role = 'user' and t.id = $3 and t.message_id = m.id
			returning m.id, m.conversation_id, m.turn_id, m.role, m.user_id, m.agent_id, m.agent_path, m.content, m.tool_calls,
			m.tool_call_id, m.answer_turn_id, m.created_at`, convID, messageID, turnID))
		if errors.Is(err, pgx.ErrNoRows) {
			return sandchat.Errorf(sandchat.ENOTFOUND, "Turn %d is not an answer of message %d in this conversation.", turnID, messageID)
		} else if err != nil {
			return pgdb.PgError(err, "message")
		}
		if msg.Versions, err = messageVersions(ctx, tx, messageID); err != nil {
			return err
		}
		ev, err = AppendEvent(ctx, tx, convID, conversations.EventMessageUpdated, nil, eventData(map[string]any{"message": msg}))
		return err
	})
	return msg, ev, err
}

// History returns the conversation's messages, oldest first, every answer version
// included (a user message lists them, and names the current one). The turn loop calls
// it on behalf of a user already authorized.
func (s *Store) History(ctx context.Context, convID int64) ([]conversations.Message, error) {
	rows, err := s.db.Query(ctx, `select `+msgColumns+` from messages where conversation_id = $1 order by id`, convID)
	if err != nil {
		return nil, err
	}
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (conversations.Message, error) { return scanMessage(r) })
	if err != nil {
		return nil, err
	}
	rows, err = s.db.Query(ctx, `select message_id, id from turns where conversation_id = $1 and message_id is not null order by id`, convID)
	if err != nil {
		return nil, err
	}
	versions := map[int64][]int64{}
	var msgID, turnID int64
	if _, err := pgx.ForEachRow(rows, []any{&msgID, &turnID}, func() error {
		versions[msgID] = append(versions[msgID], turnID)
		return nil
	}); err != nil {
		return nil, err
	}
	for i := range msgs {
		msgs[i].Versions = versions[msgs[i].ID]
	}
	return msgs, nil
}

// Messages lists a conversation's messages for a viewer.
func (s *Store) Messages(ctx context.Context, convID int64) ([]conversations.Message, error) {
	if _, err := share.Authorize(ctx, s.db, convID, sandchat.Anyone...); err != nil {
		return nil, err
	}
	return s.History(ctx, convID)
}

// fence locks the turn's row and checks in that same statement that the turn still runs
// and belongs to f.Owner, for the rest of the transaction: a turn failed by another
// node cannot be written to by the runner that lost it.
func fence(ctx context.Context, tx pgx.Tx, f conversations.Fence) error {
	tag, err := tx.Exec(ctx, `update turns set heartbeat_at = now() where id = $1 and status = 'running' and owner = $2`, f.TurnID, f.Owner)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return conversations.ErrFenced
	}
	return nil
}

// AddMessage stores an assistant or tool message of a turn with its event
// (message.completed for an assistant's, message.created for a tool result's).
func (s *Store) AddMessage(ctx context.Context, f conversations.Fence, m conversations.Message) (conversations.Message, conversations.Event, error) {
	var ev conversations.Event
	var calls []byte
	if len(m.ToolCalls) > 0 {
		calls = m.ToolCalls
	}
	var toolCallID *string
	if m.ToolCallID != "" {
		toolCallID = &m.ToolCallID
	}
	if m.AgentPath == nil {
		m.AgentPath = []string{}
	}
	m.TurnID = &f.TurnID
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, f); err != nil {
			return err
		}
		stored, err := scanMessage(tx.QueryRow(ctx, `insert into messages (conversation_id, turn_id, role, agent_id, agent_path, content, tool_calls, tool_call_id)
			values ($1, $2, $3, $4, $5, $6, $7, $8) returning `+msgColumns,
			m.ConversationID, m.TurnID, m.Role, m.AgentID, m.AgentPath, clean(m.Content), calls, toolCallID))
		if err != nil {
			return pgdb.PgError(err, "message")
		}
		typ := conversations.EventMessageCreated
		if stored.Role == "assistant" {
			typ = conversations.EventMessageCompleted
		}
		m = stored
		ev, err = AppendEvent(ctx, tx, m.ConversationID, typ, m.AgentPath, eventData(map[string]any{"message": m}))
		return err
	})
	return m, ev, err
}

// Emit stores an event of a turn that carries no row of its own (deltas, tool progress).
func (s *Store) Emit(ctx context.Context, f conversations.Fence, convID int64, typ string, agentPath []string, data any) (conversations.Event, error) {
	var ev conversations.Event
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, f); err != nil {
			return err
		}
		var err error
		ev, err = AppendEvent(ctx, tx, convID, typ, agentPath, eventData(data))
		return err
	})
	return ev, err
}

// FinishTurn ends the turn with its event, if it still runs for f.Owner; otherwise
// nothing is written and the answer is ErrFenced.
func (s *Store) FinishTurn(ctx context.Context, f conversations.Fence, convID int64, status, errText string, usage *conversations.Usage) (*conversations.Event, error) {
	return s.endTurn(ctx, convID, f.TurnID, status, errText, usage, `owner = $7`, f.Owner)
}

// endTurn ends a running turn whose row also matches cond (with its argument as $7),
// checked in the statement that ends it, with the tokens it used (nil: none reported),
// and writes its event.
func (s *Store) endTurn(ctx context.Context, convID, turnID int64, status, errText string, usage *conversations.Usage, cond string, arg any) (*conversations.Event, error) {
	var out *conversations.Event
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var msg *string
		if errText != "" {
			msg = &errText
		}
		var prompt, completion *int64
		if usage != nil {
			prompt, completion = &usage.PromptTokens, &usage.CompletionTokens
		}
		tag, err := tx.Exec(ctx, `update turns set status = $2, error = $3, finished_at = now(), prompt_tokens = $5, completion_tokens = $6
			where id = $1 and conversation_id = $4 and status = 'running' and `+cond, turnID, status, msg, convID, prompt, completion, arg)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return conversations.ErrFenced
		}
		typ := conversations.EventTurnCompleted
		if status != conversations.TurnCompleted {
			typ = conversations.EventTurnFailed
		}
		data := map[string]any{"turn_id": turnID, "status": status, "error": errText}
		if usage != nil {
			data["usage"] = usage
		}
		ev, err := AppendEvent(ctx, tx, convID, typ, nil, eventData(data))
		out = &ev
		return err
	})
	return out, err
}

// Turn returns a turn if the caller may view its conversation.
func (s *Store) Turn(ctx context.Context, convID, turnID int64) (conversations.Turn, error) {
	var t conversations.Turn
	if _, err := share.Authorize(ctx, s.db, convID, sandchat.Anyone...); err != nil {
		return t, err
	}
	var errText *string
	var prompt, completion *int64
	err := s.db.QueryRow(ctx, `select id, conversation_id, status, error, created_at, finished_at, prompt_tokens, completion_tokens from turns
		where id = $1 and conversation_id = $2`, turnID, convID).Scan(&t.ID, &t.ConversationID, &t.Status, &errText, &t.CreatedAt, &t.FinishedAt, &prompt, &completion)
	if errText != nil {
		t.Error = *errText
	}
	if prompt != nil && completion != nil { // written together
		t.Usage = &conversations.Usage{PromptTokens: *prompt, CompletionTokens: *completion}
	}
	if err != nil || t.Status != conversations.TurnRunning {
		return t, pgdb.PgError(err, "Turn")
	}
	// A running turn is the conversation's newest: its turn.started is found walking the
	// log back from the end. A log pruned past it leaves StartedSeq unset.
	err = s.db.QueryRow(ctx, `select seq from conversation_events where conversation_id = $1 and type = $2
		and data->>'turn_id' = $3::bigint::text order by seq desc limit 1`, convID, conversations.EventTurnStarted, turnID).Scan(&t.StartedSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	return t, pgdb.PgError(err, "Turn")
}

// maxEndedTurns bounds the turns Turns lists: the newest ones.
const maxEndedTurns = 1000

// Turns returns the conversation's turns that ended other than completed (cancelled,
// failed), oldest first, if the caller may view it.
func (s *Store) Turns(ctx context.Context, convID int64) ([]conversations.Turn, error) {
	if _, err := share.Authorize(ctx, s.db, convID, sandchat.Anyone...); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `select * from (select id, conversation_id, status, coalesce(error, ''), created_at, finished_at from turns
		where conversation_id = $1 and status in ('failed', 'cancelled') order by id desc limit $2) t order by id`, convID, maxEndedTurns)
	if err != nil {
		return nil, pgdb.PgError(err, "Turn")
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (conversations.Turn, error) {
		var t conversations.Turn
		return t, r.Scan(&t.ID, &t.ConversationID, &t.Status, &t.Error, &t.CreatedAt, &t.FinishedAt)
	})
}

// Heartbeat renews this node's running turns and returns those it no longer runs
// (failed by another node, e.g. while this one was paused): their runners must stop;
// and those whose cancel was requested.
func (s *Store) Heartbeat(ctx context.Context, nodeID string, turnIDs []int64) (lost, cancelled []int64, err error) {
	if len(turnIDs) == 0 {
		return nil, nil, nil
	}
	rows, err := s.db.Query(ctx, `update turns set heartbeat_at = now() where id = any($1) and node_id = $2 and status = 'running'
		returning id, cancel_requested_at is not null`, turnIDs, nodeID)
	if err != nil {
		return nil, nil, err
	}
	var renewed []int64
	var id int64
	var cancel bool
	if _, err := pgx.ForEachRow(rows, []any{&id, &cancel}, func() error {
		renewed = append(renewed, id)
		if cancel {
			cancelled = append(cancelled, id)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	for _, id := range turnIDs {
		if !slices.Contains(renewed, id) {
			lost = append(lost, id)
		}
	}
	return lost, cancelled, nil
}

// RequestCancel records a cancel on a running turn, for the heartbeat of the node that
// runs it; false when the turn no longer runs.
func (s *Store) RequestCancel(ctx context.Context, convID, turnID int64) (bool, error) {
	tag, err := s.db.Exec(ctx, `update turns set cancel_requested_at = now()
		where id = $1 and conversation_id = $2 and status = 'running'`, turnID, convID)
	if err != nil {
		return false, pgdb.PgError(err, "RequestCancel")
	}
	return tag.RowsAffected() == 1, nil
}

// QuietNodes returns the nodes with running turns not renewed for quietAfter: the ones
// whose liveness is worth checking.
func (s *Store) QuietNodes(ctx context.Context, quietAfter time.Duration) ([]string, error) {
	rows, err := s.db.Query(ctx, `select distinct node_id from turns where status = 'running'
		and heartbeat_at < now() - make_interval(secs => $1)`, quietAfter.Seconds())
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// FailStaleTurns fails, with their events, the running turns not renewed for
// staleAfter, and those of deadNodes (known dead) not renewed for quietAfter. The
// staleness is checked again in the statement that fails each turn, so a turn renewed
// meanwhile goes on.
func (s *Store) FailStaleTurns(ctx context.Context, staleAfter, quietAfter time.Duration, deadNodes []string, reason string) ([]conversations.Event, error) {
	if deadNodes == nil {
		deadNodes = []string{}
	}
	rows, err := s.db.Query(ctx, `select id, conversation_id from turns where status = 'running' and `+staleCond(1),
		staleAfter.Seconds(), quietAfter.Seconds(), deadNodes)
	if err != nil {
		return nil, err
	}
	type turn struct{ id, conv int64 }
	var list []turn
	var t turn
	if _, err := pgx.ForEachRow(rows, []any{&t.id, &t.conv}, func() error { list = append(list, t); return nil }); err != nil {
		return nil, err
	}
	var evs []conversations.Event
	for _, t := range list {
		ev, err := s.failStale(ctx, t.conv, t.id, reason, staleAfter, quietAfter, deadNodes)
		if errors.Is(err, conversations.ErrFenced) {
			continue
		} else if err != nil {
			return evs, err
		}
		evs = append(evs, *ev)
	}
	return evs, nil
}

// staleCond is the staleness test with its three arguments (stale seconds, quiet
// seconds, dead nodes) numbered from first.
func staleCond(first int) string {
	return fmt.Sprintf(`(heartbeat_at < now() - make_interval(secs => $%d)
		or (node_id = any($%d) and heartbeat_at < now() - make_interval(secs => $%d)))`, first, first+2, first+1)
}

func (s *Store) failStale(ctx context.Context, convID, turnID int64, reason string, staleAfter, quietAfter time.Duration, dead []string) (*conversations.Event, error) {
	var out *conversations.Event
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `update turns set status = $2, error = $3, finished_at = now()
			where id = $1 and conversation_id = $4 and status = 'running' and `+staleCond(5),
			turnID, conversations.TurnFailed, reason, convID, staleAfter.Seconds(), quietAfter.Seconds(), dead)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return conversations.ErrFenced
		}
		// The turn's runs in flight went with its server: closed with the turn, so no
		// record stays pending for good (a run of a server still alive, fenced, finds its
		// record closed and leaves it so).
		lost, err := json.Marshal(sandchat.RunError{Type: "SandboxError", Message: conversations.RunLostWithServer})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update executions set status = $3, error = $4, finished_at = now()
			where conversation_id = $1 and turn_id = $2 and status = 'pending'`,
			convID, turnID, sandchat.StatusFailed, lost); err != nil {
			return err
		}
		ev, err := AppendEvent(ctx, tx, convID, conversations.EventTurnFailed, nil,
			eventData(map[string]any{"turn_id": turnID, "status": conversations.TurnFailed, "error": reason}))
		out = &ev
		return err
	})
	return out, err
}

// StartHandoff records a delegation to a child agent with its agent.handoff event.
func (s *Store) StartHandoff(ctx context.Context, f conversations.Fence, convID int64, from, to int64, path []string, task string) (int64, conversations.Event, error) {
	var id int64
	var ev conversations.Event
	turnID := f.TurnID
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, f); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `insert into handoffs (conversation_id, turn_id, from_agent_id, to_agent_id, agent_path, task)
			values ($1, $2, $3, $4, $5, $6) returning id`, convID, turnID, from, to, path, clean(task)).Scan(&id); err != nil {
			return err
		}
		var err error
		ev, err = AppendEvent(ctx, tx, convID, conversations.EventAgentHandoff, path, eventData(map[string]any{
			"turn_id": turnID, "handoff_id": id, "status": conversations.HandoffStarted, "from_agent_id": from, "to_agent_id": to, "task": task}))
		return err
	})
	return id, ev, err
}

// FinishHandoff records the child's answer (or failure) with its event.
func (s *Store) FinishHandoff(ctx context.Context, f conversations.Fence, convID, id int64, path []string, status, result string) (conversations.Event, error) {
	var ev conversations.Event
	turnID := f.TurnID
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, f); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `update handoffs set status = $2, result = $3, finished_at = now() where id = $1`, id, status, clean(result)); err != nil {
			return err
		}
		var err error
		ev, err = AppendEvent(ctx, tx, convID, conversations.EventAgentHandoff, path, eventData(map[string]any{
			"turn_id": turnID, "handoff_id": id, "status": status, "result": result}))
		return err
	})
	return ev, err
}
