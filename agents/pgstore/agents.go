package pgstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

var agentShare = pgdb.Shared{Noun: "Agent", Table: "agents", MemberTable: "agent_members", ForeignKey: "agent_id"}

// Agents implements agents.Service.
type Agents struct {
	db        *pgdb.Pool
	knownTool func(string) bool
}

// NewAgents returns the agent store; knownTool validates internal_tools keys.
func NewAgents(db *pgxpool.Pool, knownTool func(string) bool) *Agents {
	return &Agents{db: pgdb.NewPool(db), knownTool: knownTool}
}

var _ agents.Service = (*Agents)(nil)

func (s *Agents) CreateAgent(ctx context.Context, in agents.AgentInput) (*agents.Agent, error) {
	if err := in.Validate(true, s.knownTool); err != nil {
		return nil, err
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	var id int64
	err = tx.QueryRow(ctx, `insert into agents (owner_id, name, description, system_prompt, model, preload)
		values ($1, $2, $3, $4, $5, coalesce($6::text[], '{}')) returning id`,
		sandchat.UserIDFromContext(ctx), *in.Name, deref(in.Description), deref(in.SystemPrompt), deref(in.Model), in.Preload).Scan(&id)
	if err != nil {
		return nil, pgdb.PgError(err, "agent")
	}
	if err := s.writeRelations(ctx, tx, id, in); err != nil {
		return nil, err
	}
	a, err := findAgent(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	return a, tx.Commit(ctx)
}

func (s *Agents) FindAgentByID(ctx context.Context, id int64) (*agents.Agent, error) {
	return findAgent(ctx, s.db, id)
}

func (s *Agents) FindAgents(ctx context.Context) ([]*agents.Agent, error) {
	rows, err := s.db.Query(ctx, `select a.id from agents a
		where a.owner_id = $1 or exists (select 1 from agent_members m where m.agent_id = a.id and m.user_id = $1)
		order by a.id`, sandchat.UserIDFromContext(ctx))
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	out := make([]*agents.Agent, 0, len(ids))
	for _, id := range ids {
		a, err := findAgent(ctx, s.db, id)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func (s *Agents) UpdateAgent(ctx context.Context, id int64, in agents.AgentInput) (*agents.Agent, error) {
	if err := in.Validate(false, s.knownTool); err != nil {
		return nil, err
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	if _, err := agentShare.Authorize(ctx, tx, id, sandchat.Editors...); err != nil {
		return nil, err
	}
	tag, err := tx.Exec(ctx, `update agents set
		name = coalesce($3, name), description = coalesce($4, description),
		system_prompt = coalesce($5, system_prompt), model = coalesce($6, model), preload = coalesce($7::text[], preload),
		version = version + 1, updated_at = now()
		where id = $1 and version = $2`,
		id, *in.Version, in.Name, in.Description, in.SystemPrompt, in.Model, in.Preload)
	if err != nil {
		return nil, pgdb.PgError(err, "agent")
	}
	if tag.RowsAffected() == 0 {
		return nil, sandchat.Errorf(sandchat.ECONFLICT, "The agent was changed since version %d was read; reload it and apply your change again.", *in.Version)
	}
	if err := s.writeRelations(ctx, tx, id, in); err != nil {
		return nil, err
	}
	if in.Name != nil {
		if err := siblingNamesUnique(ctx, tx, id); err != nil {
			return nil, err
		}
	}
	a, err := findAgent(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	return a, tx.Commit(ctx)
}

// writeRelations replaces the internal-tool settings and the children that in sets.
func (s *Agents) writeRelations(ctx context.Context, tx pgx.Tx, id int64, in agents.AgentInput) error {
	if in.InternalTools != nil {
		if _, err := tx.Exec(ctx, `delete from agent_internal_tools where agent_id = $1`, id); err != nil {
			return err
		}
		for tool, on := range *in.InternalTools {
			if _, err := tx.Exec(ctx, `insert into agent_internal_tools (agent_id, tool_id, enabled) values ($1, $2, $3)`, id, tool, on); err != nil {
				return err
			}
		}
	}
	if in.Children == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `delete from agent_children where agent_id = $1`, id); err != nil {
		return err
	}
	seen := map[int64]bool{}
	for i, child := range *in.Children {
		if child == id {
			return sandchat.Errorf(sandchat.EINVALID, "children: an agent cannot be its own child.")
		}
		if seen[child] {
			return sandchat.Errorf(sandchat.EINVALID, "children: agent %d is listed twice.", child)
		}
		seen[child] = true
		// A child must be an agent the caller can see: otherwise swarm mode would let
		// anyone borrow another user's prompts and settings.
		if _, err := agentShare.Authorize(ctx, tx, child, sandchat.Anyone...); err != nil {
			return sandchat.Errorf(sandchat.EINVALID, "children: agent %d not found.", child)
		}
		if _, err := tx.Exec(ctx, `insert into agent_children (agent_id, child_id, position) values ($1, $2, $3)`, id, child, i); err != nil {
			return pgdb.PgError(err, "agent")
		}
	}
	var dup string
	err := tx.QueryRow(ctx, `select a.name from agent_children c join agents a on a.id = c.child_id
		where c.agent_id = $1 group by a.name having count(*) > 1 limit 1`, id).Scan(&dup)
	if err == nil {
		// A parent hands work to a child by name: two children with one name are ambiguous.
		return sandchat.Errorf(sandchat.EINVALID, "children: two children are called %q; a parent delegates by name, so give them different names.", dup)
	} else if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	var cycle bool
	err = tx.QueryRow(ctx, `with recursive d(id) as (
			select child_id from agent_children where agent_id = $1
			union select c.child_id from agent_children c join d on c.agent_id = d.id)
		select exists (select 1 from d where id = $1)`, id).Scan(&cycle)
	if err != nil {
		return err
	}
	if cycle {
		return sandchat.Errorf(sandchat.EINVALID, "children: this would make the agent its own descendant.")
	}
	return nil
}

// siblingNamesUnique refuses a rename that gives the agent the name of another child of
// one of its parents.
func siblingNamesUnique(ctx context.Context, tx pgx.Tx, id int64) error {
	var parent string
	err := tx.QueryRow(ctx, `select p.name from agent_children me
		join agent_children sib on sib.agent_id = me.agent_id and sib.child_id <> me.child_id
		join agents s on s.id = sib.child_id
		join agents a on a.id = me.child_id
		join agents p on p.id = me.agent_id
		where me.child_id = $1 and s.name = a.name limit 1`, id).Scan(&parent)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	} else if err != nil {
		return err
	}
	return sandchat.Errorf(sandchat.ECONFLICT, "The agent %q already has a child with this name; a parent delegates by name, so choose another.", parent)
}

func (s *Agents) DeleteAgent(ctx context.Context, id int64) error {
	if _, err := agentShare.Authorize(ctx, s.db, id, sandchat.RoleOwner); err != nil {
		return err
	}
	_, err := s.db.Exec(ctx, `delete from agents where id = $1`, id)
	return err
}

func (s *Agents) Members(ctx context.Context, id int64) ([]sandchat.Member, error) {
	return agentShare.Members(ctx, s.db, id)
}

func (s *Agents) SetMember(ctx context.Context, id, userID int64, role string) (sandchat.Member, error) {
	return agentShare.SetMember(ctx, s.db, id, userID, role)
}

func (s *Agents) RemoveMember(ctx context.Context, id, userID int64) error {
	return agentShare.RemoveMember(ctx, s.db, id, userID)
}

// findAgent loads an agent the caller may view, with its tools and children.
func findAgent(ctx context.Context, q pgdb.Querier, id int64) (*agents.Agent, error) {
	role, err := agentShare.Authorize(ctx, q, id, sandchat.Anyone...)
	if err != nil {
		return nil, err
	}
	return loadAgent(ctx, q, id, role)
}

// LoadAgent reads an agent with no permission check, for the turn loop, which acts for
// a conversation the caller was already authorized on.
func (s *Agents) LoadAgent(ctx context.Context, id int64) (*agents.Agent, error) {
	return loadAgent(ctx, s.db, id, "")
}

func loadAgent(ctx context.Context, q pgdb.Querier, id int64, role string) (*agents.Agent, error) {
	a := &agents.Agent{ID: id, Role: role, InternalTools: map[string]bool{}, Children: []int64{}}
	err := q.QueryRow(ctx, `select owner_id, name, description, system_prompt, model, preload, version, created_at, updated_at
		from agents where id = $1`, id).Scan(&a.OwnerID, &a.Name, &a.Description, &a.SystemPrompt, &a.Model,
		&a.Preload, &a.Version, &a.CreatedAt, &a.UpdatedAt)
	if err != nil {
		return nil, pgdb.PgError(err, "Agent")
	}
	rows, err := q.Query(ctx, `select tool_id, enabled from agent_internal_tools where agent_id = $1`, id)
	if err != nil {
		return nil, err
	}
	var tool string
	var on bool
	if _, err := pgx.ForEachRow(rows, []any{&tool, &on}, func() error { a.InternalTools[tool] = on; return nil }); err != nil {
		return nil, err
	}
	rows, err = q.Query(ctx, `select child_id from agent_children where agent_id = $1 order by position`, id)
	if err != nil {
		return nil, err
	}
	children, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, err
	}
	a.Children = append(a.Children, children...)
	return a, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
