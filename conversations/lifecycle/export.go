package lifecycle

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/agents"
)

// exportReadme opens every export, so whoever unpacks it knows what they hold.
const exportReadme = `This archive holds the data of one sandchat user, as JSON and files:

user.json                                   the account
agents.json                                 the agents they own
conversations/<id>/conversation.json        each conversation they own
conversations/<id>/messages.json            its messages, every answer version included
conversations/<id>/executions.json          its Python runs: code, output, errors, display items
conversations/<id>/files/<path>             its uploads, at their path under /data
conversations/<id>/artifacts/<file id>/...  the files its runs made
messages_elsewhere.json                     their messages in conversations of others
`

// Export writes a zip of everything the user owns (their account, agents, and each of
// their conversations with its messages, runs and files) and the messages they wrote in
// conversations of others: the user's own export (GET /api/v1/me/export) or an
// administrator's, which is recorded. Files are read from the store a part at a time,
// so the memory it takes does not grow with them.
func (s *Service) Export(ctx context.Context, userID int64, w io.Writer) error {
	var user any = sandchat.UserFromContext(ctx)
	if sandchat.UserIDFromContext(ctx) != userID {
		a, err := s.Accounts.Account(ctx, userID)
		if err != nil {
			return err
		}
		if err := s.Accounts.Record(ctx, sandchat.ActionUserExport, sandchat.AuditTargetUser, userID, nil); err != nil {
			return err
		}
		user = a
	}
	owner := sandchat.WithUser(ctx, &sandchat.User{ID: userID})
	convs, err := s.Data.OwnedConversations(ctx, userID)
	if err != nil {
		return err
	}
	var owned []*agents.Agent
	if _, err := s.ownedAgents(owner, userID, func(a *agents.Agent) { owned = append(owned, a) }); err != nil {
		return err
	}
	z := &zipper{w: zip.NewWriter(w), at: time.Now()}
	if err := z.text("README.txt", exportReadme); err != nil {
		return err
	}
	if err := z.json("user.json", user); err != nil {
		return err
	}
	if err := z.json("agents.json", nonNil(owned)); err != nil {
		return err
	}
	for _, c := range convs {
		if err := s.exportConversation(owner, z, c.ID, c); err != nil {
			return fmt.Errorf("export conversation %d: %w", c.ID, err)
		}
	}
	elsewhere, err := s.Data.MessagesElsewhere(ctx, userID)
	if err != nil {
		return err
	}
	if err := z.json("messages_elsewhere.json", nonNil(elsewhere)); err != nil {
		return err
	}
	return z.w.Close()
}

func (s *Service) exportConversation(owner context.Context, z *zipper, id int64, conv any) error {
	dir := fmt.Sprintf("conversations/%d/", id)
	if err := z.json(dir+"conversation.json", conv); err != nil {
		return err
	}
	msgs, err := s.Data.Messages(owner, id)
	if err != nil {
		return err
	}
	if err := z.json(dir+"messages.json", nonNil(msgs)); err != nil {
		return err
	}
	if err := s.exportRuns(owner, z, dir+"executions.json", id); err != nil {
		return err
	}
	files, err := s.Data.Files(owner, id)
	if err != nil {
		return err
	}
	for _, f := range files {
		name := dir + "files/" + safePath(f.Name)
		if f.Source != "upload" {
			name = fmt.Sprintf("%sartifacts/%d/%s", dir, f.ID, safePath(f.Name))
		}
		if err := s.exportFile(owner, z, f.ID, name); err != nil {
			return err
		}
	}
	return nil
}

// exportPage is how many runs an export reads at once: each may hold megabytes of
// output and display items, and a conversation may hold thousands.
const exportPage = 20

// exportRuns writes every run of the conversation, oldest first, as one JSON list,
// reading them a page at a time.
func (s *Service) exportRuns(owner context.Context, z *zipper, name string, convID int64) error {
	w, err := z.create(name)
	if err != nil {
		return err
	}
	sep, end := "[\n  ", "[]\n" // what comes before the next run, and after the last
	for after := int64(0); ; {
		runs, err := s.Data.ExecutionsAfter(owner, convID, after, exportPage)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if _, err := io.WriteString(w, sep); err != nil {
				return err
			}
			if err := encodeJSON(w, r, "  "); err != nil {
				return err
			}
			sep, end, after = ",\n  ", "\n]\n", r.ID
		}
		if len(runs) < exportPage {
			break
		}
	}
	_, err = io.WriteString(w, end)
	return err
}

func (s *Service) exportFile(owner context.Context, z *zipper, id int64, name string) error {
	f, r, err := s.Data.OpenFile(owner, id)
	if err != nil {
		return err
	}
	defer r.Close()
	out, err := z.create(name)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.NewSectionReader(r, 0, f.Size))
	return err
}

// safePath keeps a stored name inside the folder it is written to, wherever the
// archive is unpacked: no part that is empty or made only of dots and spaces ("..", or
// a form Windows trims to it; uploads have none already, the check holds for every
// name), and no backslash or colon, which the name of a file a run made may hold
// (`..\..\x.bat`, `C:\x`) and which unpackers on Windows read as a folder or a drive.
// A backslash separates parts, as it would there, and a colon becomes "_".
func safePath(name string) string {
	var parts []string
	for _, p := range strings.FieldsFunc(name, func(r rune) bool { return r == '/' || r == '\\' }) {
		if p = strings.ReplaceAll(strings.TrimSpace(p), ":", "_"); strings.Trim(p, ". ") != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "unnamed"
	}
	return path.Join(parts...)
}

// zipper writes an archive's entries, each stamped with the time of the export.
type zipper struct {
	w  *zip.Writer
	at time.Time
}

func (z *zipper) create(name string) (io.Writer, error) {
	return z.w.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: z.at})
}

func (z *zipper) text(name, s string) error {
	w, err := z.create(name)
	if err == nil {
		_, err = io.WriteString(w, s)
	}
	return err
}

func (z *zipper) json(name string, v any) error {
	w, err := z.create(name)
	if err != nil {
		return err
	}
	if err := encodeJSON(w, v, ""); err != nil {
		return err
	}
	_, err = io.WriteString(w, "\n")
	return err
}

// encodeJSON writes v indented, each line after the first starting with prefix.
func encodeJSON(w io.Writer, v any, prefix string) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent(prefix, "  ")
	enc.SetEscapeHTML(false) // code reads as written: a << b, not a \u003c\u003c b
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return err
}

// nonNil writes an empty list as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
