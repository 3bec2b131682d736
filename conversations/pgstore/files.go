package pgstore

import (
	"context"
	"encoding/json"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits"
)

// Limits on uploads: one file, and all of a conversation's (they are mounted under
// /data for every run).
const (
	MaxUploadBytes       = 10 << 20
	MaxConversationBytes = 64 << 20
)

var _ toolkits.ExecutionStore = (*Store)(nil)

func (s *Store) RecordExecution(ctx context.Context, ex toolkits.Execution) (int64, []toolkits.FileRef, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer tx.Rollback(ctx)
	var errJSON []byte
	if ex.Result.Error != nil {
		if errJSON, err = json.Marshal(ex.Result.Error); err != nil {
			return 0, nil, err
		}
	}
	r := ex.Result
	var id int64
	err = tx.QueryRow(ctx, `insert into executions (conversation_id, turn_id, user_id, agent_id, session_key, code,
		status, stdout, stderr, result, error, execution_ms, session_version, restored_from)
		values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) returning id`,
		ex.ConversationID, ex.TurnID, nullID(sandchat.UserIDFromContext(ctx)), ex.AgentID, ex.SessionKey, clean(ex.Code),
		r.Status, clean(r.Stdout), clean(r.Stderr), cleanPtr(r.Result), errJSON, r.ExecutionMS, r.Session.Version, r.Session.RestoredFrom).Scan(&id)
	if err != nil {
		return 0, nil, sandchat.PgError(err, "execution")
	}
	refs := make([]toolkits.FileRef, 0, len(r.Artifacts))
	for _, a := range r.Artifacts {
		ref := toolkits.FileRef{Name: a.Name, ContentType: a.ContentType, Size: int64(len(a.Data))}
		err := tx.QueryRow(ctx, `insert into files (conversation_id, execution_id, source, name, content_type, size, data, created_by)
			values ($1, $2, 'artifact', $3, $4, $5, $6, $7) returning id`,
			ex.ConversationID, id, a.Name, a.ContentType, ref.Size, a.Data, nullID(sandchat.UserIDFromContext(ctx))).Scan(&ref.ID)
		if err != nil {
			return 0, nil, sandchat.PgError(err, "file")
		}
		refs = append(refs, ref)
	}
	return id, refs, tx.Commit(ctx)
}

// DataFiles returns the newest upload of each name; no permission check, since the
// caller is running code for a conversation it was authorized on.
func (s *Store) DataFiles(ctx context.Context, convID int64) ([]sandbox.File, error) {
	rows, err := s.db.Query(ctx, `select distinct on (name) name, data from files
		where conversation_id = $1 and source = 'upload' order by name, id desc`, convID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sandbox.File, error) {
		var f sandbox.File
		return f, r.Scan(&f.Name, &f.Data)
	})
}

// UploadFile stores a file for /data; editors only.
func (s *Store) UploadFile(ctx context.Context, convID int64, name, contentType string, data []byte) (toolkits.FileRef, error) {
	name = path.Base(strings.ReplaceAll(strings.TrimSpace(name), "\\", "/"))
	if name == "" || name == "." || name == ".." || name == "/" || len(name) > 255 || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return toolkits.FileRef{}, sandchat.Errorf(sandchat.EINVALID, "A file needs a plain name of at most 255 characters.")
	}
	if len(data) > MaxUploadBytes {
		return toolkits.FileRef{}, sandchat.Errorf(sandchat.ETOOLARGE, "A file may be at most %d MiB.", MaxUploadBytes>>20)
	}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return toolkits.FileRef{}, err
	}
	defer tx.Rollback(ctx)
	if _, err := share.Authorize(ctx, tx, convID, sandchat.Editors...); err != nil {
		return toolkits.FileRef{}, err
	}
	// Lock the conversation so two uploads cannot both pass the total.
	var total int64
	if err := tx.QueryRow(ctx, `select coalesce((select sum(size) from files where conversation_id = $1 and source = 'upload'), 0)
		from conversations where id = $1 for update`, convID).Scan(&total); err != nil {
		return toolkits.FileRef{}, err
	}
	if total+int64(len(data)) > MaxConversationBytes {
		return toolkits.FileRef{}, sandchat.Errorf(sandchat.ETOOLARGE, "A conversation's uploads may total at most %d MiB.", MaxConversationBytes>>20)
	}
	ref := toolkits.FileRef{Name: name, ContentType: contentType, Size: int64(len(data))}
	err = tx.QueryRow(ctx, `insert into files (conversation_id, source, name, content_type, size, data, created_by)
		values ($1, 'upload', $2, $3, $4, $5, $6) returning id`,
		convID, name, contentType, ref.Size, data, sandchat.UserIDFromContext(ctx)).Scan(&ref.ID)
	if err != nil {
		return ref, sandchat.PgError(err, "file")
	}
	return ref, tx.Commit(ctx)
}

// StoredFile is a file with where it came from.
type StoredFile struct {
	toolkits.FileRef
	ConversationID int64  `json:"conversation_id"`
	Source         string `json:"source"`
	ExecutionID    *int64 `json:"execution_id,omitempty"`
}

// Files lists a conversation's uploads and artifacts; view access.
func (s *Store) Files(ctx context.Context, convID int64) ([]StoredFile, error) {
	if _, err := share.Authorize(ctx, s.db, convID, sandchat.Anyone...); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `select id, name, content_type, size, conversation_id, source, execution_id
		from files where conversation_id = $1 order by id`, convID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanStoredFile)
}

func scanStoredFile(r pgx.CollectableRow) (StoredFile, error) {
	var f StoredFile
	return f, r.Scan(&f.ID, &f.Name, &f.ContentType, &f.Size, &f.ConversationID, &f.Source, &f.ExecutionID)
}

// File returns a file and its bytes if the caller may view its conversation.
func (s *Store) File(ctx context.Context, id int64) (StoredFile, []byte, error) {
	var f StoredFile
	var data []byte
	err := s.db.QueryRow(ctx, `select id, name, content_type, size, conversation_id, source, execution_id, data
		from files where id = $1`, id).Scan(&f.ID, &f.Name, &f.ContentType, &f.Size, &f.ConversationID, &f.Source, &f.ExecutionID, &data)
	if err != nil {
		return f, nil, sandchat.PgError(err, "File")
	}
	if _, err := share.Authorize(ctx, s.db, f.ConversationID, sandchat.Anyone...); err != nil {
		return f, nil, sandchat.Errorf(sandchat.ENOTFOUND, "File not found.")
	}
	return f, data, nil
}

// StoredExecution is a recorded sandbox run as the web client redraws it: the code,
// its output, the error with its traceback, and the files it made.
type StoredExecution struct {
	ID          int64              `json:"id"`
	TurnID      *int64             `json:"turn_id"`
	AgentID     *int64             `json:"agent_id"`
	Code        string             `json:"code"`
	Status      string             `json:"status"`
	Stdout      string             `json:"stdout"`
	Stderr      string             `json:"stderr"`
	Result      *string            `json:"result"`
	Error       json.RawMessage    `json:"error"`
	ExecutionMS int64              `json:"execution_ms"`
	Artifacts   []toolkits.FileRef `json:"artifacts"`
}

// Executions lists a conversation's recorded runs, oldest first, with their artifacts
// that still exist; view access. Bounded to the newest 500.
func (s *Store) Executions(ctx context.Context, convID int64) ([]StoredExecution, error) {
	if _, err := share.Authorize(ctx, s.db, convID, sandchat.Anyone...); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `select * from (select e.id, e.turn_id, e.agent_id, e.code, e.status, e.stdout, e.stderr,
			e.result, e.error, e.execution_ms,
			coalesce((select json_agg(json_build_object('id', f.id, 'name', f.name, 'content_type', f.content_type, 'size', f.size) order by f.id)
				from files f where f.execution_id = e.id), '[]')
		from executions e where e.conversation_id = $1 order by e.id desc limit 500) x order by id`, convID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StoredExecution, error) {
		var e StoredExecution
		var errJSON, files []byte
		err := r.Scan(&e.ID, &e.TurnID, &e.AgentID, &e.Code, &e.Status, &e.Stdout, &e.Stderr, &e.Result, &errJSON, &e.ExecutionMS, &files)
		if err != nil {
			return e, err
		}
		if len(errJSON) > 0 {
			e.Error = errJSON
		}
		return e, json.Unmarshal(files, &e.Artifacts)
	})
}

// DeleteFile removes an upload (it leaves /data from the next run on) or an artifact;
// editors only.
func (s *Store) DeleteFile(ctx context.Context, id int64) error {
	var convID int64
	if err := s.db.QueryRow(ctx, `select conversation_id from files where id = $1`, id).Scan(&convID); err != nil {
		return sandchat.PgError(err, "File")
	}
	if _, err := share.Authorize(ctx, s.db, convID, sandchat.Editors...); err != nil {
		if sandchat.ErrorCode(err) == sandchat.ENOTFOUND {
			return sandchat.Errorf(sandchat.ENOTFOUND, "File not found.")
		}
		return err
	}
	_, err := s.db.Exec(ctx, `delete from files where id = $1`, id)
	return err
}

func nullID(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

// clean makes program output storable as Postgres text, which refuses NUL bytes.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

func cleanPtr(s *string) *string {
	if s == nil {
		return nil
	}
	c := clean(*s)
	return &c
}
