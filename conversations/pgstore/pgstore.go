// Package pgstore keeps conversations, their members, tool overrides and event log in
// Postgres.
package pgstore

import (
	"context"
	"encoding/json"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

var share = pgdb.Shared{Noun: "Conversation", Table: "conversations", MemberTable: "conversation_members", ForeignKey: "conversation_id"}
var agentShare = pgdb.Shared{Noun: "Agent", Table: "agents", MemberTable: "agent_members", ForeignKey: "agent_id"}

// Store implements conversations.Service.
type Store struct {
	db *pgdb.Pool
	// locks is where the quota locks are held (quota.go).
	locks *pgdb.Pool
	// retention is how long events are kept for replay.
	retention time.Duration
}

// New returns the store; events older than retention are pruned by Prune.
func New(db *pgxpool.Pool, retention time.Duration, opt ...Options) *Store {
	s := &Store{db: pgdb.NewPool(db), retention: retention}
	s.locks = s.db
	for _, o := range opt {
		if o.QuotaLocks != nil {
			s.locks = pgdb.NewPool(o.QuotaLocks)
		}
	}
	return s
}

var _ conversations.Service = (*Store)(nil)

const convColumns = `c.id, c.owner_id, c.agent_id, c.title, c.created_at, c.updated_at`

func scanConversation(row pgx.Row, c *conversations.Conversation) error {
	return row.Scan(&c.ID, &c.OwnerID, &c.AgentID, &c.Title, &c.CreatedAt, &c.UpdatedAt)
}

func (s *Store) CreateConversation(ctx context.Context, agentID *int64, title string) (*conversations.Conversation, error) {
	title = strings.TrimSpace(title)
	if len(title) > conversations.MaxTitleLen {
		return nil, sandchat.Errorf(sandchat.EINVALID, "title must be at most %d characters.", conversations.MaxTitleLen)
	}
	if agentID != nil {
		// Talking to an agent needs only view access to it, like using a shared bot.
		if _, err := agentShare.Authorize(ctx, s.db, *agentID, sandchat.Anyone...); err != nil {
			return nil, err
		}
	}
	c := &conversations.Conversation{Role: sandchat.RoleOwner}
	err := scanConversation(s.db.QueryRow(ctx, `insert into conversations as c (owner_id, agent_id, title) values ($1, $2, $3)
		returning `+convColumns, sandchat.UserIDFromContext(ctx), agentID, title), c)
	return c, pgdb.PgError(err, "conversation")
}

func (s *Store) FindConversationByID(ctx context.Context, id int64) (*conversations.Conversation, error) {
	return findConversation(ctx, s.db, id, sandchat.Anyone...)
}

func findConversation(ctx context.Context, q pgdb.Querier, id int64, want ...string) (*conversations.Conversation, error) {
	role, err := share.Authorize(ctx, q, id, want...)
	if err != nil {
		return nil, err
	}
	c := &conversations.Conversation{Role: role}
	err = scanConversation(q.QueryRow(ctx, `select `+convColumns+` from conversations c where c.id = $1`, id), c)
	return c, pgdb.PgError(err, "Conversation")
}

func (s *Store) FindConversations(ctx context.Context) ([]*conversations.Conversation, error) {
	rows, err := s.db.Query(ctx, `select `+convColumns+`, coalesce(m.role, 'owner') from conversations c
		left join conversation_members m on m.conversation_id = c.id and m.user_id = $1
		where c.owner_id = $1 or m.user_id is not null order by c.updated_at desc, c.id desc limit 500`,
		sandchat.UserIDFromContext(ctx))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*conversations.Conversation, error) {
		c := &conversations.Conversation{}
		return c, r.Scan(&c.ID, &c.OwnerID, &c.AgentID, &c.Title, &c.CreatedAt, &c.UpdatedAt, &c.Role)
	})
}

// searchPrefix turns plainto_tsquery's text ('import' & 'sy') into a query of word
// starts ('import':* & 'sy':*): a search matches as its words are typed.
const searchPrefix = `('(?:[^']|'')*')`

// searchIndexed is how much of a message the search reads: the expression of the
// index messages_search (migrations/017_conversation_search.sql), as the query must
// repeat it for the planner to use the index.
const searchIndexed = `to_tsvector('simple', left(msg.content, 100000))`

func (s *Store) SearchConversations(ctx context.Context, query string, limit int) ([]conversations.SearchHit, error) {
	query = strings.TrimSpace(query)
	if len(query) > conversations.MaxSearchLen {
		return nil, sandchat.Errorf(sandchat.EINVALID, "A search is at most %d characters.", conversations.MaxSearchLen)
	}
	if !strings.ContainsFunc(query, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) {
		return []conversations.SearchHit{}, nil // no word to look for
	}
	rows, err := s.db.Query(ctx, `with q as (
			select to_tsquery('simple', regexp_replace(plainto_tsquery('simple', $2)::text, $3, '\1:*', 'g')) as q
		), visible as (
			select c.id, coalesce(m.role, 'owner') as role from conversations c
			left join conversation_members m on m.conversation_id = c.id and m.user_id = $1
			where c.owner_id = $1 or m.user_id is not null
		), best as (
			select distinct on (msg.conversation_id) msg.conversation_id, msg.id, msg.role,
				ts_rank(`+searchIndexed+`, q.q) as rank
			from messages msg, q
			where msg.role in ('user', 'assistant') and msg.conversation_id in (select id from visible)
				and `+searchIndexed+` @@ q.q
			order by msg.conversation_id, rank desc, msg.id desc
		)
		select `+convColumns+`, v.role, b.id, b.role,
			case when b.id is null then '' else ts_headline('simple', left(msg.content, 100000), q.q,
				'StartSel="", StopSel="", MaxWords=20, MinWords=8, ShortWord=0, MaxFragments=1, FragmentDelimiter=" … "') end
		from visible v join conversations c on c.id = v.id cross join q
		left join best b on b.conversation_id = c.id
		left join messages msg on msg.id = b.id
		where b.id is not null or to_tsvector('simple', c.title) @@ q.q
		order by (to_tsvector('simple', c.title) @@ q.q) desc, coalesce(b.rank, 0) desc, c.updated_at desc, c.id desc
		limit $4`, sandchat.UserIDFromContext(ctx), query, searchPrefix, limit)
	if err != nil {
		return nil, pgdb.PgError(err, "Conversation")
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (conversations.SearchHit, error) {
		h := conversations.SearchHit{Conversation: &conversations.Conversation{}}
		c := h.Conversation
		var msgID *int64
		var role *string
		var snippet string
		if err := r.Scan(&c.ID, &c.OwnerID, &c.AgentID, &c.Title, &c.CreatedAt, &c.UpdatedAt, &c.Role, &msgID, &role, &snippet); err != nil {
			return h, err
		}
		if msgID != nil {
			h.Match = &conversations.SearchMatch{MessageID: *msgID, Role: *role, Snippet: strings.Join(strings.Fields(snippet), " ")}
		}
		return h, nil
	})
}

func (s *Store) RenameConversation(ctx context.Context, id int64, title string) (*conversations.Conversation, error) {
	title = strings.TrimSpace(title)
	if title == "" || len(title) > conversations.MaxTitleLen {
		return nil, sandchat.Errorf(sandchat.EINVALID, "title must be 1 to %d characters.", conversations.MaxTitleLen)
	}
	var c *conversations.Conversation
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		role, err := share.Authorize(ctx, tx, id, sandchat.Editors...)
		if err != nil {
			return err
		}
		c = &conversations.Conversation{Role: role}
		return scanConversation(tx.QueryRow(ctx, `update conversations c set title = $2, updated_at = now() where id = $1
			returning `+convColumns, id, title), c)
	})
	return c, pgdb.PgError(err, "Conversation")
}

func (s *Store) DeleteConversation(ctx context.Context, id int64) error {
	if _, err := share.Authorize(ctx, s.db, id, sandchat.RoleOwner); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, `delete from conversations where id = $1`, id)
	return err
}

func (s *Store) Members(ctx context.Context, id int64) ([]sandchat.Member, error) {
	return share.Members(ctx, s.db, id)
}

func (s *Store) SetMember(ctx context.Context, id, userID int64, role string) (sandchat.Member, error) {
	return share.SetMember(ctx, s.db, id, userID, role)
}

func (s *Store) RemoveMember(ctx context.Context, id, userID int64) error {
	return share.RemoveMember(ctx, s.db, id, userID)
}

func (s *Store) ToolSettings(ctx context.Context, id int64) (conversations.ToolSettings, error) {
	c, err := findConversation(ctx, s.db, id, sandchat.Anyone...)
	if err != nil {
		return conversations.ToolSettings{}, err
	}
	return toolSettings(ctx, s.db, c)
}

func toolSettings(ctx context.Context, q pgdb.Querier, c *conversations.Conversation) (conversations.ToolSettings, error) {
	ts := conversations.ToolSettings{Conversation: c, Overrides: map[string]bool{}, Agent: map[string]bool{}}
	var tool, state string
	rows, err := q.Query(ctx, `select tool_id, state from conversation_internal_tools where conversation_id = $1`, c.ID)
	if err != nil {
		return ts, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&tool, &state}, func() error { ts.Overrides[tool] = state == "on"; return nil }); err != nil {
		return ts, err
	}
	if c.AgentID == nil {
		return ts, nil
	}
	var on bool
	rows, err = q.Query(ctx, `select tool_id, enabled from agent_internal_tools where agent_id = $1`, *c.AgentID)
	if err != nil {
		return ts, err
	}
	_, err = pgx.ForEachRow(rows, []any{&tool, &on}, func() error { ts.Agent[tool] = on; return nil })
	return ts, err
}

func (s *Store) SetToolOverride(ctx context.Context, id int64, toolID string, enabled *bool,
	evType string, render func(conversations.ToolSettings) (json.RawMessage, error)) (conversations.ToolSettings, conversations.Event, error) {
	var ev conversations.Event
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return conversations.ToolSettings{}, ev, err
	}
	defer tx.Rollback(ctx)
	c, err := findConversation(ctx, tx, id, sandchat.Editors...)
	if err != nil {
		return conversations.ToolSettings{}, ev, err
	}
	if enabled == nil {
		_, err = tx.Exec(ctx, `delete from conversation_internal_tools where conversation_id = $1 and tool_id = $2`, id, toolID)
	} else {
		state := "off"
		if *enabled {
			state = "on"
		}
		_, err = tx.Exec(ctx, `insert into conversation_internal_tools (conversation_id, tool_id, state, updated_by)
			values ($1, $2, $3, $4) on conflict (conversation_id, tool_id)
			do update set state = excluded.state, updated_by = excluded.updated_by, updated_at = now()`,
			id, toolID, state, sandchat.UserIDFromContext(ctx))
	}
	if err != nil {
		return conversations.ToolSettings{}, ev, err
	}
	ts, err := toolSettings(ctx, tx, c)
	if err != nil {
		return ts, ev, err
	}
	data, err := render(ts)
	if err != nil {
		return ts, ev, err
	}
	if ev, err = AppendEvent(ctx, tx, id, evType, nil, data); err != nil {
		return ts, ev, err
	}
	return ts, ev, tx.Commit(ctx)
}

// AppendEvent gives the event the conversation's next seq and stores it, inside the
// caller's transaction, so the change and its event commit or fail together. The row
// lock on the conversation orders concurrent appends.
func AppendEvent(ctx context.Context, tx pgx.Tx, convID int64, typ string, agentPath []string, data json.RawMessage) (conversations.Event, error) {
	ev := conversations.Event{Type: typ, ConversationID: convID, AgentPath: agentPath, Data: data}
	err := tx.QueryRow(ctx, `update conversations set last_seq = last_seq + 1, updated_at = now() where id = $1 returning last_seq`, convID).Scan(&ev.Seq)
	if err != nil {
		return ev, pgdb.PgError(err, "Conversation")
	}
	_, err = tx.Exec(ctx, `insert into conversation_events (conversation_id, seq, type, agent_path, data) values ($1, $2, $3, $4, $5)`,
		convID, ev.Seq, typ, agentPath, data)
	return ev, err
}

func (s *Store) EventsSince(ctx context.Context, id, since int64, limit int) ([]conversations.Event, bool, error) {
	if _, err := share.Authorize(ctx, s.db, id, sandchat.Anyone...); err != nil {
		return nil, false, err
	}
	var oldest *int64
	var last int64
	if err := s.db.QueryRow(ctx, `select (select min(seq) from conversation_events where conversation_id = $1), last_seq
		from conversations where id = $1`, id).Scan(&oldest, &last); err != nil {
		return nil, false, pgdb.PgError(err, "Conversation")
	}
	// Every event after since must still be there, the first being since+1; a since
	// beyond last comes from another history (a reset database) and cannot be trusted.
	if since > last || (since < last && (oldest == nil || *oldest > since+1)) {
		return nil, false, nil
	}
	rows, err := s.db.Query(ctx, `select seq, type, agent_path, data from conversation_events
		where conversation_id = $1 and seq > $2 order by seq limit $3`, id, since, limit)
	if err != nil {
		return nil, false, err
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (conversations.Event, error) {
		ev := conversations.Event{ConversationID: id}
		return ev, r.Scan(&ev.Seq, &ev.Type, &ev.AgentPath, &ev.Data)
	})
	return evs, err == nil, err
}

func (s *Store) LastSeq(ctx context.Context, id int64) (int64, error) {
	if _, err := share.Authorize(ctx, s.db, id, sandchat.Anyone...); err != nil {
		return 0, err
	}
	var last int64
	err := s.db.QueryRow(ctx, `select last_seq from conversations where id = $1`, id).Scan(&last)
	return last, pgdb.PgError(err, "Conversation")
}

// Prune deletes events past the retention period, keeping each conversation's newest
// event so its seq is never reused. Clients asking for pruned events get
// recovered:false and refetch over REST.
func (s *Store) Prune(ctx context.Context) (int64, error) {
	tag, err := s.db.Exec(ctx, `delete from conversation_events e where e.created_at < now() - make_interval(secs => $1)
		and e.seq < (select last_seq from conversations c where c.id = e.conversation_id)`, s.retention.Seconds())
	return tag.RowsAffected(), err
}
