package toolkits

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
)

// fakeEngine answers every run with reply, after release is closed when it is set.
type fakeEngine struct {
	Engine
	reply   func(ctx context.Context) (sandbox.Result, error)
	release chan struct{}
}

func (e *fakeEngine) DataVersions(string) map[string]string { return nil }

func (e *fakeEngine) Execute(ctx context.Context, _ string, _ sandbox.Request) (sandbox.Result, error) {
	if e.release != nil {
		<-e.release
	}
	return e.reply(ctx)
}

// fakeRecords keeps how each run was finished.
type fakeRecords struct {
	ExecutionStore
	mu       sync.Mutex
	finished map[int64]string // status, or "failed: reason"
}

func (s *fakeRecords) DataFiles(context.Context, int64, map[string]string) ([]conversations.DataFile, error) {
	return nil, nil
}

func (s *fakeRecords) BeginExecution(context.Context, conversations.Execution) (int64, error) {
	return 1, nil
}

func (s *fakeRecords) FinishExecution(_ context.Context, id int64, ex conversations.Execution, failure string) ([]conversations.FileRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished == nil {
		s.finished = map[int64]string{}
	}
	s.finished[id] = ex.Outcome.Status
	if failure != "" {
		s.finished[id] = "failed: " + failure
	}
	return nil, nil
}

func (s *fakeRecords) record(id int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.finished[id]
}

var ranOK = sandbox.Result{Status: sandbox.StatusSuccess, Stdout: "ran\n"}

// TestExecuteAnswerMatchesRecord: what the caller is told about a run and what its
// record says (which decides whether replay applies it) agree.
func TestExecuteAnswerMatchesRecord(t *testing.T) {
	t.Run("the code ran but its state was not saved: 503, recorded failed", func(t *testing.T) {
		store := &fakeRecords{}
		s := &Sandbox{Store: store, Engine: &fakeEngine{reply: func(context.Context) (sandbox.Result, error) {
			return ranOK, sandchat.Errorf(sandchat.EUNAVAILABLE, "The code ran but its session state could not be saved.")
		}}}
		_, err := s.Execute(context.Background(), RunRequest{ConversationID: 7, Code: "x += 100"})
		var ae *sandchat.Error
		if !errors.As(err, &ae) || ae.Code != sandchat.EUNAVAILABLE || ae.RetryAfter == 0 || !strings.Contains(ae.Message, "not kept") {
			t.Fatalf("answer %v, want 503 with Retry-After saying the effects were not kept", err)
		}
		if rec := store.record(1); !strings.HasPrefix(rec, "failed: ") || !strings.Contains(rec, "not kept") {
			t.Fatalf("record %q, want failed: not kept", rec)
		}
	})

	t.Run("the code ended as it was stopped and its state was saved: success", func(t *testing.T) {
		store := &fakeRecords{}
		ctx, cancel := context.WithCancel(context.Background())
		s := &Sandbox{Store: store, Engine: &fakeEngine{reply: func(ctx context.Context) (sandbox.Result, error) {
			cancel()
			return ranOK, ctx.Err()
		}}}
		run, err := s.Execute(ctx, RunRequest{ConversationID: 7, Code: "x += 100"})
		if err != nil || run.Status != sandbox.StatusSuccess {
			t.Fatalf("answer %+v %v, want success", run, err)
		}
		if rec := store.record(1); rec != sandbox.StatusSuccess {
			t.Fatalf("record %q, want success", rec)
		}
	})

	t.Run("cut off by the shutdown: answered at once, recorded when the engine lets go", func(t *testing.T) {
		store := &fakeRecords{}
		engine := &fakeEngine{release: make(chan struct{}), reply: func(context.Context) (sandbox.Result, error) {
			return sandbox.Result{Status: sandbox.StatusError, Error: &sandbox.ExecError{Type: "SandboxError", Message: "killed"}}, context.Canceled
		}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := &Sandbox{Store: store, Engine: engine}
		answered := make(chan error, 1)
		go func() {
			_, err := s.Execute(ctx, RunRequest{ConversationID: 7, Code: "import time\ntime.sleep(10)"})
			answered <- err
		}()
		time.Sleep(50 * time.Millisecond) // the run is in the engine
		cancel()
		s.CutOff()
		var err error
		select {
		case err = <-answered:
		case <-time.After(5 * time.Second):
			t.Fatal("a run the engine holds was not answered at the cut-off")
		}
		if sandchat.ErrorCode(err) != sandchat.EUNAVAILABLE || !strings.Contains(sandchat.ErrorMessage(err), "/executions/1") {
			t.Fatalf("answer %v, want 503 naming the run's record", err)
		}
		if rec := store.record(1); rec != "" {
			t.Fatalf("record %q before the engine let go of the run", rec)
		}
		close(engine.release)
		wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer wcancel()
		s.Wait(wctx)
		if rec := store.record(1); rec != sandbox.StatusError {
			t.Fatalf("record %q once the engine let go, want error", rec)
		}
		if _, err := s.Execute(context.Background(), RunRequest{ConversationID: 7, Code: "1"}); sandchat.ErrorCode(err) != sandchat.EUNAVAILABLE {
			t.Fatalf("a run after the cut-off: %v, want 503", err)
		}
	})
}
