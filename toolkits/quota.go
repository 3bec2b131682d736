package toolkits

import (
	"context"
	"fmt"
	"slices"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
)

// A conversation has one storage quota (Sandbox.Quota) for everything it keeps: its
// uploads and artifacts in Postgres, and the Python state of each of its sessions in
// the engine. Each way in checks the sum:
//   - an upload (UploadFile), the sessions' state read from the engine just before;
//   - a run's state save: the run's Request.Budget is what the files leave, shared with
//     the conversation's other sessions, which the engine reads just before the save;
//   - a run's artifacts: FinishExecution keeps those that fit, with the sessions' state
//     as the engine reported it after the run.
//
// Uploads and artifacts are checked under the conversation's row lock. The files are
// read before a run queues for its session, so an upload that lands while a run waits
// or runs is counted by the run after it.

// quota is the conversation quota in bytes.
func (s *Sandbox) quota() int64 {
	if s.Quota > 0 {
		return s.Quota
	}
	return conversations.DefaultQuota
}

// usage reads what the conversation's files take (one query) and what the state of
// each of its sessions holds in the engine (Redis only).
func (s *Sandbox) usage(ctx context.Context, convID int64) (files conversations.FileUsage, state int64, err error) {
	if files, err = s.Store.FileUsage(ctx, convID); err != nil {
		return files, 0, err
	}
	if s.Engine != nil {
		state, err = s.Engine.StateBytes(ctx, s.sessions(convID, files)...)
	}
	return files, state, err
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
	files, state, err := s.usage(ctx, convID)
	if err != nil {
		return conversations.Storage{}, err
	}
	return conversations.NewStorage(files.Uploads, files.Artifacts, state, s.quota()), nil
}

// UploadFile stores an upload if it fits in the conversation's quota with everything
// else it holds; the store checks edit access.
func (s *Sandbox) UploadFile(ctx context.Context, convID int64, name, contentType string, data []byte) (conversations.FileRef, bool, error) {
	// Strangers learn nothing and cost no reads of session state.
	if _, err := s.Tools.Conversations.ToolSettings(ctx, convID); err != nil {
		return conversations.FileRef{}, false, err
	}
	_, state, err := s.usage(ctx, convID)
	if err != nil {
		return conversations.FileRef{}, false, err
	}
	return s.Store.UploadFile(ctx, convID, name, contentType, data, conversations.Quota{Limit: s.quota(), State: state})
}

// runQuota is the quota as one run of a session meets it: what the conversation's
// files leave of it is the budget the run's session shares with its other sessions.
type runQuota struct {
	files  conversations.FileUsage
	budget sandbox.Budget
}

// quotaFor reads the conversation's files before a run of session key; the engine
// reads what its other sessions hold just before the run's save.
func (s *Sandbox) quotaFor(ctx context.Context, convID int64, key string) (runQuota, error) {
	files, err := s.Store.FileUsage(ctx, convID)
	if err != nil {
		return runQuota{}, err
	}
	shared := slices.DeleteFunc(s.sessions(convID, files), func(k string) bool { return k == key })
	// A conversation already at its quota (an upload landed during a run) still runs
	// code, but no save fits: the engine takes a budget of zero as none, so one byte.
	return runQuota{files: files, budget: sandbox.Budget{Bytes: max(s.quota()-files.Uploads-files.Artifacts, 1), Shared: shared}}, nil
}

// underQuota applies the conversation's quota to a run the engine answered: its stderr
// says when the quota, not the engine's limit per session, is what refused its state
// save, with the sizes; its record gets the quota its artifacts must fit in, with the
// state of the conversation's sessions as the run left them.
func (s *Sandbox) underQuota(res *sandbox.Result, ex conversations.Execution, q runQuota) conversations.Execution {
	others := res.Session.SharedBytes
	if res.Session.NotSaved && (s.MaxStateBytes <= 0 || q.budget.Bytes-others < s.MaxStateBytes) {
		res.Stderr += fmt.Sprintf("[sandbox] that limit is what this conversation's %s storage quota leaves for this session: uploads %s + artifacts %s + Python state of its other sessions %s. Delete files or reset the Python session to make room.\n",
			sandchat.Size(s.quota()), sandchat.Size(q.files.Uploads), sandchat.Size(q.files.Artifacts), sandchat.Size(others))
	}
	ex.Quota = conversations.Quota{Limit: s.quota(), State: others + res.Session.StateBytes}
	return ex
}
