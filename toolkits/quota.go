package toolkits

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
)

// A conversation has one storage quota (Sandbox.Quota) for everything it keeps: its
// uploads and artifacts in Postgres, and the Python state of each of its sessions in
// the engine (Redis, with a cold tier in Postgres). The quota holds at every moment,
// not at the next run: every write it counts reserves against it first, under the
// conversation's quota lock (the store's: a Postgres advisory lock, so writers on every
// node take turns), checked against what the conversation keeps at that moment and
// made before the lock goes:
//   - an upload (UploadFile) and a run's artifacts (FinishExecution): the store takes the
//     lock, reads the files, asks the quota's State for what the sessions hold now
//     (sessionState), and writes in the same transaction;
//   - a write of a session's state (a run's save, each later checkpoint of its heap,
//     every session of a swarm alike): the engine calls the run's Budget.Reserve just
//     before it (budget), which takes the lock (LockQuota), reads the files and the
//     other sessions' state, and gives the engine the room they leave; the engine
//     writes within it, then releases the lock. The engine knows no conversation: only
//     that a write of the session waits for Reserve and ends with its release.
//
// A refused write leaves what was there: an upload is refused (413, with the sizes), a
// run's files are not kept (its stderr says which), a save is refused by the engine and
// the run's stderr says the quota is why (underQuota), a checkpoint is put off and the
// session stays durable by its log.
//
// Deadlocks: the lock is taken after a session's lease (a save holds it), never before
// one, and never while another quota lock is held; Reserve reads only Redis under it.
// Its holder writes to Redis and to the cold tier (Postgres), so the store holds it on
// a pool of its own (pgstore.Options): writers waiting for it never take the
// connections its holder needs. The lock is held only for the check and the write: the
// heap a checkpoint saves is taken before it.

// quota is the conversation quota in bytes.
func (s *Sandbox) quota() int64 {
	if s.Quota > 0 {
		return s.Quota
	}
	return conversations.DefaultQuota
}

// sessions names the conversation's Python sessions: those its runs used, and its own.
func (s *Sandbox) sessions(convID int64, files conversations.FileUsage) []string {
	keys := slices.Clone(files.SessionKeys)
	if own := s.SessionKey(convID, nil); !slices.Contains(keys, own) {
		keys = append(keys, own)
	}
	return keys
}

// Storage is what the conversation holds against its quota (view access).
func (s *Sandbox) Storage(ctx context.Context, convID int64) (conversations.Storage, error) {
	if _, err := s.Tools.Conversations.ToolSettings(ctx, convID); err != nil {
		return conversations.Storage{}, err
	}
	files, err := s.Store.FileUsage(ctx, convID)
	if err != nil {
		return conversations.Storage{}, err
	}
	return s.quotaOf(convID).Storage(ctx, files)
}

// sessionState is the quota's State for convID: what the saved state of each of its
// sessions holds now.
func (s *Sandbox) sessionState(convID int64) conversations.SessionState {
	return func(ctx context.Context, files conversations.FileUsage) (int64, error) {
		if s.Engine == nil {
			return 0, nil
		}
		return s.Engine.StateBytes(ctx, s.sessions(convID, files)...)
	}
}

// quotaOf is convID's quota as the store applies it to the files it keeps.
func (s *Sandbox) quotaOf(convID int64) conversations.Quota {
	return conversations.Quota{Limit: s.quota(), State: s.sessionState(convID)}
}

// UploadFile stores an upload if it fits in the conversation's quota with everything
// else it holds; the store checks edit access first.
func (s *Sandbox) UploadFile(ctx context.Context, convID int64, name, contentType string, data []byte) (conversations.FileRef, bool, error) {
	ref, replaced, err := s.Store.UploadFile(ctx, convID, name, contentType, data, s.quotaOf(convID))
	if errors.Is(err, conversations.ErrOverQuota) {
		s.refused(RefusedUpload)
	}
	return ref, replaced, err
}

// runQuota is the quota as the state writes of one run's session meet it: what the
// last reservation saw, for the run's record.
type runQuota struct {
	mu   sync.Mutex
	last reservation // guarded by mu
}

// reservation is what a reservation of the quota for a session's state saw: the
// conversation's files, its other sessions' state, and the room they left.
type reservation struct {
	files        conversations.FileUsage
	others, room int64
}

func (q *runQuota) saw(r reservation) {
	q.mu.Lock()
	q.last = r
	q.mu.Unlock()
}

func (q *runQuota) seen() reservation {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last
}

// budget is the Budget of a run of session key of convID: each write of the session's
// state reserves, under the conversation's quota lock, what its files and its other
// sessions leave at that moment (see the comment at the top).
func (s *Sandbox) budget(convID int64, key string, q *runQuota) sandbox.Budget {
	return sandbox.Budget{Reserve: func(ctx context.Context) (int64, func(), error) {
		files, unlock, err := s.Store.LockQuota(ctx, convID)
		if err != nil {
			return 0, nil, err
		}
		others, err := s.Engine.StateBytes(ctx, slices.DeleteFunc(s.sessions(convID, files), func(k string) bool { return k == key })...)
		if err != nil {
			unlock()
			return 0, nil, err
		}
		r := reservation{files: files, others: others, room: s.quota() - files.Uploads - files.Artifacts - others}
		q.saw(r)
		return r.room, unlock, nil
	}}
}

// underQuota applies the conversation's quota to a run the engine answered: its stderr
// says when the quota, not the engine's limit per session, is what refused its state
// save, with the sizes; its record gets the quota its artifacts must fit in.
func (s *Sandbox) underQuota(res *sandbox.Result, ex conversations.Execution, q *runQuota) conversations.Execution {
	if r := q.seen(); res.Session.NotSaved && (s.MaxStateBytes <= 0 || r.room < s.MaxStateBytes) {
		s.refused(RefusedState)
		res.Stderr += fmt.Sprintf("[sandbox] that limit is what this conversation's %s storage quota leaves for this session: uploads %s + artifacts %s + Python state of its other sessions %s. Delete files or reset the Python session to make room.\n",
			sandchat.Size(s.quota()), sandchat.Size(r.files.Uploads), sandchat.Size(r.files.Artifacts), sandchat.Size(r.others))
	}
	ex.Quota = s.quotaOf(ex.ConversationID)
	return ex
}
