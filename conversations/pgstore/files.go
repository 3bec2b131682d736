package pgstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/migrations/pgdb"
)

// BeginExecution records a run as pending before it starts: whatever happens to the
// run afterwards, its row exists, so a run that advanced the session is never unaudited.
func (s *Store) BeginExecution(ctx context.Context, ex conversations.Execution) (int64, error) {
	var id int64
	err := s.db.QueryRow(ctx, `insert into executions (conversation_id, turn_id, user_id, agent_id, session_key, code, status)
		values ($1, $2, $3, $4, $5, $6, 'pending') returning id`,
		ex.ConversationID, ex.TurnID, nullID(sandchat.UserIDFromContext(ctx)), ex.AgentID, ex.SessionKey, []byte(ex.Code)).Scan(&id)
	return id, pgdb.PgError(err, "execution")
}

// FinishExecution completes a pending run with its outcome and artifacts in one
// transaction. It is safe to retry: once the row is finished, a retry returns the
// artifacts already stored. failure, when set, marks a run the engine could not
// complete (sandchat.StatusFailed) and says why. Artifacts that do not fit in ex.Quota are
// not kept; notKept is what the record's stderr says of them, after the run's own.
func (s *Store) FinishExecution(ctx context.Context, id int64, ex conversations.Execution, failure string) (refs []conversations.FileRef, notKept string, err error) {
	r := ex.Outcome
	status := r.Status
	var errJSON []byte
	switch {
	case failure != "":
		status = sandchat.StatusFailed
		errJSON, err = json.Marshal(sandchat.RunError{Type: "SandboxError", Message: failure})
	case r.Error != nil:
		errJSON, err = json.Marshal(r.Error)
	}
	if err != nil {
		return nil, "", err
	}
	var result []byte
	if r.Result != nil {
		result = []byte(*r.Result)
	}
	var order []byte
	if len(r.Order) > 0 {
		if order, err = json.Marshal(r.Order[:min(len(r.Order), sandchat.MaxOutputOrder)]); err != nil {
			return nil, "", err
		}
	}
	uid := nullID(sandchat.UserIDFromContext(ctx))
	err = s.withArtifacts(ctx, ex.ConversationID, len(r.Artifacts) > 0, func(tx pgx.Tx, files conversations.FileUsage) error {
		keep, stderr, err := capArtifacts(ctx, files, r.Artifacts, r.Stderr, ex.Quota)
		if err != nil {
			return err
		}
		notKept = strings.TrimPrefix(stderr, r.Stderr)
		tag, err := tx.Exec(ctx, `update executions set status = $2, stdout = $3, stderr = $4, result = $5, error = $6,
			execution_ms = $7, session_version = $8, restored_from = $9, output_order = $10, finished_at = now()
			where id = $1 and status = 'pending'`,
			id, status, []byte(r.Stdout), []byte(stderr), result, errJSON, r.ExecutionMS, ex.SessionVersion, nullText(ex.RestoredFrom), order)
		if err != nil {
			return pgdb.PgError(err, "execution")
		}
		if tag.RowsAffected() == 0 {
			// Finished by an earlier attempt whose commit we did not hear about.
			var stored []byte
			if err := tx.QueryRow(ctx, `select stderr from executions where id = $1`, id).Scan(&stored); err != nil {
				return pgdb.PgError(err, "execution")
			}
			notKept = ""
			if after, ok := strings.CutPrefix(string(stored), r.Stderr); ok {
				notKept = after
			}
			rows, err := tx.Query(ctx, `select id, name, content_type, size from files where execution_id = $1 order by id`, id)
			if err != nil {
				return err
			}
			refs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (conversations.FileRef, error) {
				var f conversations.FileRef
				return f, r.Scan(&f.ID, &f.Name, &f.ContentType, &f.Size)
			})
			return err
		}
		refs = make([]conversations.FileRef, 0, len(keep))
		stored := make(map[string]int64, len(keep))
		for _, a := range keep {
			ref := conversations.FileRef{Name: sandchat.ArtifactName(a.Name), ContentType: a.ContentType, Size: int64(len(a.Data))}
			err := tx.QueryRow(ctx, `insert into files (conversation_id, execution_id, source, name, content_type, size, data, created_by)
				values ($1, $2, 'artifact', $3, $4, $5, $6, $7) returning id`,
				ex.ConversationID, id, ref.Name, clean(ref.ContentType), ref.Size, a.Data, uid).Scan(&ref.ID)
			if err != nil {
				return pgdb.PgError(err, "file")
			}
			refs = append(refs, ref)
			stored[a.Name] = ref.ID
		}
		if len(r.Displays) == 0 {
			return nil
		}
		displays, err := displaysJSON(r.Displays, stored)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `update executions set displays = $2 where id = $1`, id, displays)
		return pgdb.PgError(err, "execution")
	})
	if err != nil {
		return nil, "", err
	}
	return refs, notKept, nil
}

// MaxStoredDisplayBytes bounds the display items kept with one execution record; items
// past it keep their kind, the start of their text and their image's file, marked
// truncated.
const MaxStoredDisplayBytes = 1 << 20

// storedDisplay is a display item as kept with its execution: text parts, and an image
// as the id of its file.
type storedDisplay struct {
	sandchat.Display
	Truncated bool `json:"truncated,omitempty"`
}

// displaysJSON is what an execution keeps of its display items: fileIDs maps the name
// of each stored image file to its id (an image whose file was not kept has none).
func displaysJSON(items []sandchat.Display, fileIDs map[string]int64) ([]byte, error) {
	out := make([]json.RawMessage, 0, len(items))
	budget := MaxStoredDisplayBytes
	for _, d := range items {
		sd := storedDisplay{Display: sandchat.Display{Kind: d.Kind, Text: clean(d.Text), HTML: clean(d.HTML),
			Markdown: clean(d.Markdown), SVG: clean(d.SVG), LaTeX: clean(d.LaTeX), At: d.At}}
		// jsonb refuses the NUL character.
		if len(d.JSON) > 0 {
			sd.JSON = json.RawMessage(bytes.ReplaceAll(d.JSON, []byte(`\u0000`), []byte(`\ufffd`)))
		}
		if len(d.Plotly) > 0 {
			sd.Plotly = json.RawMessage(bytes.ReplaceAll(d.Plotly, []byte(`\u0000`), []byte(`\ufffd`)))
		}
		if d.Image != nil {
			img := *d.Image
			img.FileID = fileIDs[img.Name]
			sd.Image = &img
		}
		b, err := marshalRaw(sd)
		if err != nil {
			return nil, err
		}
		if len(b) > budget {
			const keep = 1 << 10
			sd.Display = sandchat.Display{Kind: sd.Kind, Text: sandchat.TruncateUTF8(sd.Text, keep, "…"), Image: sd.Image, At: sd.At}
			sd.Truncated = true
			if b, err = marshalRaw(sd); err != nil {
				return nil, err
			}
		}
		budget -= len(b)
		out = append(out, b)
	}
	return marshalRaw(out)
}

// marshalRaw encodes v without escaping HTML: markup is most of what display items
// hold, and escaped it would count three times its size against the bound.
func marshalRaw(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// SessionRuns returns the finished runs of a sandbox session since it was last reset,
// oldest first: what the engine replays to rebuild a session its store lost. A session
// key names its conversation, so the key alone finds them.
func (s *Store) SessionRuns(ctx context.Context, key string) ([]sandchat.SessionRun, error) {
	rows, err := s.db.Query(ctx, `select code, status, created_at, coalesce(finished_at, created_at) from executions
		where session_key = $1 and status <> 'pending'
		and id > coalesce((select max(after_execution_id) from sandbox_resets where session_key = $1), 0)
		order by id`, key)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (sandchat.SessionRun, error) {
		var sr sandchat.SessionRun
		var code []byte
		err := r.Scan(&code, &sr.Status, &sr.StartedAt, &sr.FinishedAt)
		sr.Code = string(code)
		return sr, err
	})
}

// RecordReset notes that a session was reset, so replay never goes past it: after the
// runs recorded so far, or only those before the run before (not 0), which ran in the
// session that came after the reset (the engine's reset of a state that cannot run).
func (s *Store) RecordReset(ctx context.Context, convID int64, key string, before int64) error {
	_, err := s.db.Exec(ctx, `insert into sandbox_resets (conversation_id, session_key, after_execution_id, user_id)
		values ($1, $2, coalesce((select max(id) from executions where conversation_id = $1 and session_key = $2 and ($4 = 0 or id < $4)), 0), $3)`,
		convID, key, nullID(sandchat.UserIDFromContext(ctx)), before)
	return pgdb.PgError(err, "session reset")
}

// Execution returns one recorded run of a conversation the caller may view: where
// clients get the full output that events carry truncated.
func (s *Store) Execution(ctx context.Context, convID, id int64) (conversations.StoredExecution, error) {
	var e conversations.StoredExecution
	if _, err := share.Authorize(ctx, s.db, convID, sandchat.Anyone...); err != nil {
		return e, err
	}
	var code, stdout, stderr, result []byte
	var errJSON []byte
	err := s.db.QueryRow(ctx, `select id, conversation_id, turn_id, agent_id, status, code, stdout, stderr, result, error, execution_ms,
		session_version, restored_from, coalesce(displays, '[]'), output_order, created_at, finished_at from executions where id = $1 and conversation_id = $2`, id, convID).
		Scan(&e.ID, &e.ConversationID, &e.TurnID, &e.AgentID, &e.Status, &code, &stdout, &stderr, &result, &errJSON, &e.ExecutionMS,
			&e.SessionVersion, &e.RestoredFrom, &e.Displays, &e.Order, &e.CreatedAt, &e.FinishedAt)
	if err != nil {
		return e, pgdb.PgError(err, "Execution")
	}
	e.Code, e.Stdout, e.Stderr = string(code), string(stdout), string(stderr)
	if result != nil {
		r := string(result)
		e.Result = &r
	}
	if errJSON != nil {
		e.Error = errJSON
	}
	rows, err := s.db.Query(ctx, `select id, name, content_type, size from files where execution_id = $1 order by id`, id)
	if err != nil {
		return e, err
	}
	e.Artifacts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (conversations.FileRef, error) {
		var f conversations.FileRef
		return f, r.Scan(&f.ID, &f.Name, &f.ContentType, &f.Size)
	})
	return e, err
}

func nullText(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// DataFiles returns the newest upload of each name with its version, and its bytes
// unless have (name → version) says the caller holds that version already; no
// permission check, since the caller is running code for a conversation it was
// authorized on.
func (s *Store) DataFiles(ctx context.Context, convID int64, have map[string]string) ([]conversations.DataFile, error) {
	names := make([]string, 0, len(have))
	versions := make([]string, 0, len(have))
	for n, v := range have {
		names, versions = append(names, n), append(versions, v)
	}
	// An upload's version is its row and the time it was last written: replacing the
	// file rewrites both. Bytes are read only for versions the caller does not hold.
	rows, err := s.db.Query(ctx, `with f as (
			select distinct on (name) name, size, data,
				id::text || '.' || floor(extract(epoch from created_at) * 1000000)::bigint::text as version
			from files where conversation_id = $1 and source = 'upload' order by name, id desc)
		select f.name, f.version, f.size, case when h.version is distinct from f.version then f.data end
		from f left join unnest($2::text[], $3::text[]) as h(name, version) on h.name = f.name
		order by f.name`, convID, names, versions)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (conversations.DataFile, error) {
		var f conversations.DataFile
		return f, r.Scan(&f.Name, &f.Version, &f.Size, &f.Data)
	})
}

// withArtifacts runs fn in a transaction, under the conversation's quota lock when it
// keeps artifacts (files are then what the conversation's files take).
func (s *Store) withArtifacts(ctx context.Context, convID int64, artifacts bool, fn func(tx pgx.Tx, files conversations.FileUsage) error) error {
	if artifacts {
		return s.withQuota(ctx, convID, fn)
	}
	return s.withTx(ctx, func(tx pgx.Tx) error { return fn(tx, conversations.FileUsage{}) })
}

// capArtifacts keeps the artifacts that fit in the conversation's quota with its files
// (read under the quota lock) and its sessions' state (read now), and says in stderr
// which did not, with the sizes.
func capArtifacts(ctx context.Context, files conversations.FileUsage, arts []sandchat.Artifact, stderr string, q conversations.Quota) ([]sandchat.Artifact, string, error) {
	if len(arts) == 0 {
		return arts, stderr, nil
	}
	use, err := q.Storage(ctx, files)
	if err != nil {
		return nil, stderr, err
	}
	var keep []sandchat.Artifact
	var dropped []string
	for _, a := range arts {
		size := int64(len(a.Data))
		if use.Used+size > use.Quota {
			dropped = append(dropped, fmt.Sprintf("%s (%s)", sandchat.ArtifactName(a.Name), sandchat.Size(size)))
			continue
		}
		use = conversations.NewStorage(use.Uploads, use.Artifacts+size, use.State, use.Quota)
		keep = append(keep, a)
	}
	if len(dropped) > 0 {
		stderr += fmt.Sprintf("[sandbox] files not kept: this conversation's storage is full (%s), and these do not fit (delete files or reset the Python session to make room): %s\n",
			use, strings.Join(dropped, ", "))
	}
	return keep, stderr, nil
}

// UploadFile stores a file for /data at its relative path (reports/2025/q1.csv, in
// NFC: see sandchat.DataPath); a file already at that path is replaced, keeping its
// id. Editors only. replaced says which happened.
//
// The upload must fit in q with everything else the conversation holds, read under its
// quota lock (q.State for its Python sessions).
func (s *Store) UploadFile(ctx context.Context, convID int64, name, contentType string, data []byte, q conversations.Quota) (ref conversations.FileRef, replaced bool, err error) {
	name, err = sandchat.DataPath(name)
	if err != nil {
		return ref, false, err
	}
	if len(data) > conversations.MaxUploadBytes {
		return ref, false, conversations.UploadTooLarge(name, int64(len(data)))
	}
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	tx, err := s.locks.Begin(ctx)
	if err != nil {
		return ref, false, err
	}
	defer tx.Rollback(ctx)
	// Strangers take no lock and cost no read of the sessions' state.
	if _, err := share.Authorize(ctx, tx, convID, sandchat.Editors...); err != nil {
		return ref, false, err
	}
	files, err := lockQuota(ctx, tx, convID)
	if err != nil {
		return ref, false, err
	}
	// A path is a file or a folder, never both: /data/a cannot hold a/b.csv.
	var clash string
	err = tx.QueryRow(ctx, `select name from files where conversation_id = $1 and source = 'upload'
		and (name = any($2) or starts_with(name, $3)) limit 1`, convID, parentDirs(name), name+"/").Scan(&clash)
	switch {
	case err == nil:
		return ref, false, sandchat.Errorf(sandchat.ECONFLICT, "%s cannot be uploaded: /data/%s is taken by %s (delete it first).", name, name, clash)
	case !errors.Is(err, pgx.ErrNoRows):
		return ref, false, pgdb.PgError(err, "files")
	}
	var oldID, oldSize int64
	err = tx.QueryRow(ctx, `select id, size from files where conversation_id = $1 and source = 'upload' and name = $2`, convID, name).Scan(&oldID, &oldSize)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return ref, false, pgdb.PgError(err, "files")
	}
	size := int64(len(data))
	files.Uploads -= oldSize // a replaced file frees its own size first
	if files.Uploads+size > conversations.MaxConversationBytes {
		return ref, false, sandchat.WithCause(sandchat.Errorf(sandchat.ETOOLARGE, "This conversation's uploads take %s of the %s uploads may take; %s (%s) does not fit. Delete files to make room.",
			sandchat.Size(files.Uploads), sandchat.Size(conversations.MaxConversationBytes), name, sandchat.Size(size)), conversations.ErrOverQuota)
	}
	use, err := q.Storage(ctx, files)
	if err != nil {
		return ref, false, err
	}
	if use.Used+size > use.Quota {
		return ref, false, sandchat.WithCause(sandchat.Errorf(sandchat.ETOOLARGE, "This conversation's storage is full: %s; %s (%s) does not fit. Delete files or reset the Python session to make room.",
			use, name, sandchat.Size(size)), conversations.ErrOverQuota)
	}
	ref = conversations.FileRef{ID: oldID, Name: name, ContentType: contentType, Size: int64(len(data))}
	if oldID != 0 {
		_, err = tx.Exec(ctx, `update files set content_type = $2, size = $3, data = $4, created_by = $5, created_at = now() where id = $1`,
			oldID, contentType, ref.Size, data, nullID(sandchat.UserIDFromContext(ctx)))
	} else {
		err = tx.QueryRow(ctx, `insert into files (conversation_id, source, name, content_type, size, data, created_by)
			values ($1, 'upload', $2, $3, $4, $5, $6) returning id`,
			convID, name, contentType, ref.Size, data, nullID(sandchat.UserIDFromContext(ctx))).Scan(&ref.ID)
	}
	if err != nil {
		return ref, false, pgdb.PgError(err, "file")
	}
	return ref, oldID != 0, tx.Commit(ctx)
}

// parentDirs returns the folders a path sits in: a/b/c.csv → a, a/b.
func parentDirs(p string) []string {
	var dirs []string
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		dirs = append(dirs, d)
	}
	return dirs
}

// Files lists a conversation's uploads and artifacts; view access.
func (s *Store) Files(ctx context.Context, convID int64) ([]conversations.StoredFile, error) {
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

func scanStoredFile(r pgx.CollectableRow) (conversations.StoredFile, error) {
	var f conversations.StoredFile
	return f, r.Scan(&f.ID, &f.Name, &f.ContentType, &f.Size, &f.ConversationID, &f.Source, &f.ExecutionID)
}

// File returns a file and its bytes if the caller may view its conversation.
// The caller's access is checked before the bytes are read; a file of a conversation
// the caller may not see is not found, and a database that fails says so (503).
func (s *Store) File(ctx context.Context, id int64) (conversations.StoredFile, []byte, error) {
	var f conversations.StoredFile
	err := s.db.QueryRow(ctx, `select id, name, content_type, size, conversation_id, source, execution_id
		from files where id = $1`, id).Scan(&f.ID, &f.Name, &f.ContentType, &f.Size, &f.ConversationID, &f.Source, &f.ExecutionID)
	if err != nil {
		return f, nil, pgdb.PgError(err, "File")
	}
	if _, err := share.Authorize(ctx, s.db, f.ConversationID, sandchat.Anyone...); err != nil {
		if c := sandchat.ErrorCode(err); c == sandchat.ENOTFOUND || c == sandchat.EFORBIDDEN {
			return f, nil, sandchat.Errorf(sandchat.ENOTFOUND, "File not found.")
		}
		return f, nil, err
	}
	var data []byte
	if err := s.db.QueryRow(ctx, `select data from files where id = $1`, id).Scan(&data); err != nil {
		return f, nil, pgdb.PgError(err, "File")
	}
	return f, data, nil
}

// executionColumns are what a stored run is read as (scanExecution), from executions e:
// the run, and its artifacts that still exist.
const executionColumns = `e.id, e.conversation_id, e.turn_id, e.agent_id, e.code, e.status,
	e.stdout, e.stderr, e.result, e.error, e.execution_ms, e.session_version, e.restored_from, coalesce(e.displays, '[]'),
	e.output_order, e.created_at, e.finished_at,
	coalesce((select json_agg(json_build_object('id', f.id, 'name', f.name, 'content_type', f.content_type, 'size', f.size) order by f.id)
		from files f where f.execution_id = e.id), '[]')`

// Executions lists a conversation's recorded runs, oldest first, with their artifacts
// that still exist; view access. Bounded to the newest 500.
func (s *Store) Executions(ctx context.Context, convID int64) ([]conversations.StoredExecution, error) {
	return s.executions(ctx, convID, `select * from (select `+executionColumns+`
		from executions e where e.conversation_id = $1 order by e.id desc limit 500) x order by id`, convID)
}

// ExecutionsAfter lists at most limit of a conversation's recorded runs after the run
// after (0: from the first), oldest first: all of them, a page at a time (an export);
// view access.
func (s *Store) ExecutionsAfter(ctx context.Context, convID, after int64, limit int) ([]conversations.StoredExecution, error) {
	return s.executions(ctx, convID, `select `+executionColumns+`
		from executions e where e.conversation_id = $1 and e.id > $2 order by e.id limit $3`, convID, after, limit)
}

func (s *Store) executions(ctx context.Context, convID int64, sql string, args ...any) ([]conversations.StoredExecution, error) {
	if _, err := share.Authorize(ctx, s.db, convID, sandchat.Anyone...); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, pgdb.PgError(err, "executions")
	}
	out, err := pgx.CollectRows(rows, scanExecution)
	return out, pgdb.PgError(err, "executions")
}

func scanExecution(r pgx.CollectableRow) (conversations.StoredExecution, error) {
	var e conversations.StoredExecution
	// Code and output are stored as the bytes the program wrote (NUL included).
	var code, stdout, stderr, result, errJSON, files []byte
	err := r.Scan(&e.ID, &e.ConversationID, &e.TurnID, &e.AgentID, &code, &e.Status, &stdout, &stderr, &result, &errJSON,
		&e.ExecutionMS, &e.SessionVersion, &e.RestoredFrom, &e.Displays, &e.Order, &e.CreatedAt, &e.FinishedAt, &files)
	if err != nil {
		return e, err
	}
	e.Code, e.Stdout, e.Stderr = string(code), string(stdout), string(stderr)
	if result != nil {
		v := string(result)
		e.Result = &v
	}
	if len(errJSON) > 0 {
		e.Error = errJSON
	}
	return e, json.Unmarshal(files, &e.Artifacts)
}

// DeleteFile removes an upload (it leaves /data from the next run on) or an artifact;
// editors only.
func (s *Store) DeleteFile(ctx context.Context, id int64) error {
	var convID int64
	if err := s.db.QueryRow(ctx, `select conversation_id from files where id = $1`, id).Scan(&convID); err != nil {
		return pgdb.PgError(err, "File")
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
