// Package lifecycle is what an administrator does to users and their data, and what
// the deployment does to data no one uses: accounts disabled, enabled, renamed, deleted
// or erased, their API tokens and browser sessions listed and revoked, a user's data
// exported, each action recorded in the audit (the stores record it in the transaction
// that makes it); and retention, which deletes conversations idle for longer than the
// deployment keeps them. docs/operating.md says what each does for an operator.
//
// It consumes its stores and the live parts (sockets, running turns, Python sessions)
// through the small interfaces below; cmd/sandchat wires them, for the server and for
// the command line alike.
package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents"
	"github.com/sandchat/sandchat/conversations"
)

// Accounts are the users, their tokens and sessions, and the audit (agents/pgstore's
// Users). Each method is for administrators and records its change.
type Accounts interface {
	Accounts(ctx context.Context) ([]sandchat.Account, error)
	Account(ctx context.Context, id int64) (sandchat.Account, error)
	SetDisabled(ctx context.Context, id int64, disabled bool) (sandchat.Account, error)
	RenameUser(ctx context.Context, id int64, name string) (sandchat.Account, error)
	// DeleteUser refuses while the user owns conversations or agents.
	DeleteUser(ctx context.Context, id int64) error
	// EraseAccount deletes the account of a user whose data was erased.
	EraseAccount(ctx context.Context, id int64, erased any) error
	Tokens(ctx context.Context, userID int64) ([]sandchat.Token, error)
	IssueToken(ctx context.Context, userID int64, ttl time.Duration, note string) (sandchat.Token, string, error)
	RevokeToken(ctx context.Context, id int64) (sandchat.Token, error)
	WebSessions(ctx context.Context, userID int64) ([]sandchat.WebSession, error)
	RevokeWebSession(ctx context.Context, id int64) (sandchat.WebSession, error)
	Record(ctx context.Context, action, targetType string, targetID int64, details any) error
	Audit(ctx context.Context, q sandchat.AuditQuery) ([]sandchat.AuditEntry, error)
}

// Data is what the conversations' store holds of one user, and what retention reads
// (conversations/pgstore).
type Data interface {
	OwnedConversations(ctx context.Context, userID int64) ([]conversations.Conversation, error)
	MessagesElsewhere(ctx context.Context, userID int64) ([]conversations.Message, error)
	RunningTurnsBy(ctx context.Context, userID int64) ([]conversations.TurnRef, error)
	RequestCancel(ctx context.Context, convID, turnID int64) (bool, error)
	// DeleteConversation needs its owner in ctx; the conversation's Python state goes
	// first (Python).
	DeleteConversation(ctx context.Context, id int64) error
	EraseAuthor(ctx context.Context, userID int64) (conversations.Erased, error)
	Messages(ctx context.Context, convID int64) ([]conversations.Message, error)
	// ExecutionsAfter lists at most limit runs after the run after, oldest first.
	ExecutionsAfter(ctx context.Context, convID, after int64, limit int) ([]conversations.StoredExecution, error)
	Files(ctx context.Context, convID int64) ([]conversations.StoredFile, error)
	OpenFile(ctx context.Context, id int64) (conversations.StoredFile, conversations.FileReader, error)
}

// Python deletes the Python state of a conversation's sessions in every tier, its
// live processes on every node included (toolkits.Sandbox); its owner is in ctx.
type Python interface {
	ForgetConversation(ctx context.Context, convID int64) error
}

// Agents lists the agents the user in ctx may see (agents/pgstore).
type Agents interface {
	FindAgents(ctx context.Context) ([]*agents.Agent, error)
}

// Sockets closes WebSockets on every node: the user's that the token or session cred
// names (its Kind and ID) opened, or all of theirs when cred is zero (frontendapi.Sockets).
type Sockets interface {
	CloseSockets(ctx context.Context, userID int64, cred sandchat.Credential, reason string) error
}

// Cancels reaches the node running a turn (redisbus.Bus); a node that misses it sees
// the cancel recorded on the turn at its next renewal, within a second.
type Cancels interface {
	PublishCancel(ctx context.Context, turnID int64) error
}

// Service carries out administrators' actions.
type Service struct {
	Accounts Accounts
	Data     Data
	Python   Python
	Agents   Agents
	Sockets  Sockets
	Cancels  Cancels
	Log      *slog.Logger
}

// Users lists every account.
func (s *Service) Users(ctx context.Context) ([]sandchat.Account, error) {
	return s.Accounts.Accounts(ctx)
}

// User is one account.
func (s *Service) User(ctx context.Context, id int64) (sandchat.Account, error) {
	return s.Accounts.Account(ctx, id)
}

// Disable stops the account from signing in: its requests are refused from now on, on
// every node (nothing caches a credential), its sockets are closed and the turns it
// started are cancelled. Its data, tokens and sessions stay for Enable.
func (s *Service) Disable(ctx context.Context, id int64) (sandchat.Account, error) {
	a, err := s.Accounts.SetDisabled(ctx, id, true)
	if err != nil {
		return a, err
	}
	s.closeSockets(ctx, id, sandchat.Credential{}, "account disabled")
	s.cancelTurns(ctx, id)
	return a, nil
}

// Enable lets the account sign in again, with the tokens and sessions it had.
func (s *Service) Enable(ctx context.Context, id int64) (sandchat.Account, error) {
	return s.Accounts.SetDisabled(ctx, id, false)
}

// Rename changes the account's name.
func (s *Service) Rename(ctx context.Context, id int64, name string) (sandchat.Account, error) {
	return s.Accounts.RenameUser(ctx, id, name)
}

// Delete deletes the account, which must own no conversations or agents (Erase deletes
// those): its tokens, sessions and memberships go, its sockets are closed, its turns
// cancelled; what it wrote in others' conversations stays there, without its author.
func (s *Service) Delete(ctx context.Context, id int64) error {
	if err := sandchat.RequireAdmin(ctx); err != nil {
		return err
	}
	// Its running turns are known by its id only while the account exists.
	turns, err := s.Data.RunningTurnsBy(ctx, id)
	if err != nil {
		return err
	}
	if err := s.Accounts.DeleteUser(ctx, id); err != nil {
		return err
	}
	s.closeSockets(ctx, id, sandchat.Credential{}, "account deleted")
	s.cancel(ctx, turns)
	return nil
}

// Erasure is what an erase did.
type Erasure struct {
	ConversationsDeleted int `json:"conversations_deleted"`
	AgentsDeleted        int `json:"agents_deleted"`
	conversations.Erased
}

// Erase deletes everything of the user's, for good (the right to erasure): the
// account is disabled first, so nothing new is made meanwhile; each conversation they
// own goes as its owner's delete takes it (its Python state in Redis and Postgres and
// its live processes on every node first, then its messages, runs and files); then
// what they wrote in conversations of others is taken out (conversations/pgstore's
// EraseAuthor), and the account with its agents, tokens, sessions and memberships is
// deleted. An erase that fails part way leaves the account disabled and can be run
// again: it goes on where it stopped. What one that stops did is recorded then.
func (s *Service) Erase(ctx context.Context, id int64) (out Erasure, err error) {
	if _, err := s.Disable(ctx, id); err != nil {
		return out, err
	}
	defer func() {
		if err != nil && (out.ConversationsDeleted > 0 || out.Erased != conversations.Erased{}) {
			s.recordStopped(ctx, id, out, err)
		}
	}()
	owner := sandchat.WithUser(ctx, &sandchat.User{ID: id})
	convs, err := s.Data.OwnedConversations(ctx, id)
	if err != nil {
		return out, err
	}
	for _, c := range convs {
		err := s.deleteConversation(owner, c.ID)
		switch {
		case sandchat.ErrorCode(err) == sandchat.ENOTFOUND:
			continue // deleted meanwhile (by retention, or its owner just before)
		case err != nil:
			return out, fmt.Errorf("delete conversation %d: %w", c.ID, err)
		}
		out.ConversationsDeleted++
	}
	if out.AgentsDeleted, err = s.ownedAgents(owner, id, nil); err != nil {
		return out, err
	}
	if out.Erased, err = s.Data.EraseAuthor(ctx, id); err != nil {
		return out, err
	}
	if err := s.Accounts.EraseAccount(ctx, id, out); err != nil {
		return out, err
	}
	s.closeSockets(ctx, id, sandchat.Credential{}, "account erased")
	s.Log.InfoContext(ctx, "user erased", "user_id", id, "conversations", out.ConversationsDeleted, "agents", out.AgentsDeleted,
		"messages_anonymized", out.Messages, "uploads_deleted", out.Uploads)
	return out, nil
}

// stoppedErasure is the record of an erase that stopped part way.
type stoppedErasure struct {
	Erasure
	Finished  bool   `json:"finished"`
	StoppedBy string `json:"stopped_by"`
}

// recordStopped puts what an erase that stopped part way deleted on the record: the
// conversations gone, the words taken out. Run again, the erase records only what it
// does then; without this, what it did first would be on no record at all.
func (s *Service) recordStopped(ctx context.Context, id int64, done Erasure, cause error) {
	if err := s.Accounts.Record(ctx, sandchat.ActionUserErase, sandchat.AuditTargetUser, id,
		stoppedErasure{Erasure: done, StoppedBy: sandchat.ErrorMessage(cause)}); err != nil {
		s.Log.WarnContext(ctx, "record an erase that stopped part way", "user_id", id, "conversations_deleted", done.ConversationsDeleted, "err", err)
	}
}

// deleteConversation is the owner's delete of a conversation (DELETE
// /api/v1/conversations/{id}): its Python state first, so a failure leaves both.
func (s *Service) deleteConversation(owner context.Context, id int64) error {
	if err := s.Python.ForgetConversation(owner, id); err != nil {
		return err
	}
	return s.Data.DeleteConversation(owner, id)
}

// ownedAgents counts the agents the user owns, and hands each to fn when set.
func (s *Service) ownedAgents(owner context.Context, id int64, fn func(*agents.Agent)) (int, error) {
	all, err := s.Agents.FindAgents(owner)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range all {
		if a.OwnerID == id {
			n++
			if fn != nil {
				fn(a)
			}
		}
	}
	return n, nil
}

// Tokens lists API tokens: the user's, or everyone's (userID 0).
func (s *Service) Tokens(ctx context.Context, userID int64) ([]sandchat.Token, error) {
	return s.Accounts.Tokens(ctx, userID)
}

// IssueToken makes an API token for the user, expiring after ttl (0: never); its
// secret is returned this once.
func (s *Service) IssueToken(ctx context.Context, userID int64, ttl time.Duration, note string) (sandchat.Token, string, error) {
	return s.Accounts.IssueToken(ctx, userID, ttl, note)
}

// RevokeToken revokes the token: its next request is refused, on every node, and the
// sockets it opened are closed.
func (s *Service) RevokeToken(ctx context.Context, id int64) (sandchat.Token, error) {
	t, err := s.Accounts.RevokeToken(ctx, id)
	if err != nil {
		return t, err
	}
	s.closeSockets(ctx, t.UserID, sandchat.Credential{Kind: sandchat.CredentialToken, ID: id}, "token revoked")
	return t, nil
}

// Sessions lists live browser sessions: the user's, or everyone's (userID 0).
func (s *Service) Sessions(ctx context.Context, userID int64) ([]sandchat.WebSession, error) {
	return s.Accounts.WebSessions(ctx, userID)
}

// RevokeSession ends a browser session, as its sign-out would: its cookie signs no one
// in, and the sockets it opened are closed.
func (s *Service) RevokeSession(ctx context.Context, id int64) (sandchat.WebSession, error) {
	ws, err := s.Accounts.RevokeWebSession(ctx, id)
	if err != nil {
		return ws, err
	}
	s.closeSockets(ctx, ws.UserID, sandchat.Credential{Kind: sandchat.CredentialSession, ID: id}, "signed out by an administrator")
	return ws, nil
}

// Audit reads the record of administrative actions, newest first.
func (s *Service) Audit(ctx context.Context, q sandchat.AuditQuery) ([]sandchat.AuditEntry, error) {
	return s.Accounts.Audit(ctx, q)
}

// closeSockets closes sockets after a change that is committed already: a socket that
// is not told now (Redis away) finds out at its next check of its credential, within a
// minute.
func (s *Service) closeSockets(ctx context.Context, userID int64, cred sandchat.Credential, reason string) {
	if err := s.Sockets.CloseSockets(ctx, userID, cred, reason); err != nil {
		s.Log.WarnContext(ctx, "close the sockets of a revoked credential; they close at their next check of it", "user_id", userID, "err", err)
	}
}

// cancelTurns cancels the turns the user started, through the turns' own cancel path:
// recorded on the turn (the node running it sees it at its next renewal), and
// published for that node to stop it at once.
func (s *Service) cancelTurns(ctx context.Context, userID int64) {
	turns, err := s.Data.RunningTurnsBy(ctx, userID)
	if err != nil {
		s.Log.WarnContext(ctx, "find the running turns of a disabled user", "user_id", userID, "err", err)
		return
	}
	s.cancel(ctx, turns)
}

func (s *Service) cancel(ctx context.Context, turns []conversations.TurnRef) {
	for _, t := range turns {
		running, err := s.Data.RequestCancel(ctx, t.ConversationID, t.TurnID)
		if err != nil {
			s.Log.WarnContext(ctx, "cancel a turn of a disabled user", "turn_id", t.TurnID, "err", err)
			continue
		}
		if !running {
			continue
		}
		if err := s.Cancels.PublishCancel(ctx, t.TurnID); err != nil {
			s.Log.WarnContext(ctx, "publish a cancel; the turn's node sees it at its next renewal", "turn_id", t.TurnID, "err", err)
		}
	}
}
