package frontendapi

import (
	"context"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"path"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
)

// SandboxStatus reports the engine for GET /api/v1/sandbox/status.
type SandboxStatus interface {
	Status(ctx context.Context) sandbox.Status
}

// FileStore is the download side of conversation files (uploads go through the
// SandboxService, which holds the conversation's quota).
type FileStore interface {
	Files(ctx context.Context, convID int64) ([]conversations.StoredFile, error)
	File(ctx context.Context, id int64) (conversations.StoredFile, []byte, error)
	Execution(ctx context.Context, convID, id int64) (conversations.StoredExecution, error)
	DeleteFile(ctx context.Context, id int64) error
	Executions(ctx context.Context, convID int64) ([]conversations.StoredExecution, error)
}

func (s *Server) sandboxRoutes(v1 fiber.Router) {
	v1.Get("/sandbox/status", func(c *fiber.Ctx) error {
		// The engine's paths on this node and every session's figures are the
		// operator's; a member sees their own conversation's session.
		if sandchat.RequireAdmin(c.UserContext()) != nil {
			return sandchat.Errorf(sandchat.EFORBIDDEN, "Only administrators see the sandbox engine's status; "+
				"a conversation's own Python session is at GET /api/v1/conversations/{id}/sandbox/session.")
		}
		if s.sandboxStatus == nil {
			return c.JSON(sandbox.Status{Reason: "The sandbox engine is not configured."})
		}
		return c.JSON(s.sandboxStatus.Status(c.UserContext()))
	})
	v1.Post("/conversations/:id/sandbox/executions", s.execute)
	v1.Get("/conversations/:id/sandbox/executions/:execution_id", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		execID, err := paramID(c, "execution_id")
		if err != nil {
			return err
		}
		ex, err := s.files.Execution(c.UserContext(), id, execID)
		if err != nil {
			return err
		}
		return c.JSON(ex)
	})
	v1.Get("/conversations/:id/sandbox/session", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		info, err := s.sandbox.Session(c.UserContext(), id)
		if err != nil {
			return err
		}
		return c.JSON(info)
	})
	v1.Delete("/conversations/:id/sandbox/session", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		if err := s.sandbox.Reset(c.UserContext(), id); err != nil {
			return err
		}
		return c.SendStatus(fiber.StatusNoContent)
	})
	v1.Post("/conversations/:id/files", s.uploadFile)
	v1.Get("/conversations/:id/storage", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		st, err := s.sandbox.Storage(c.UserContext(), id)
		if err != nil {
			return err
		}
		return c.JSON(st)
	})
	v1.Get("/conversations/:id/files", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		files, err := s.files.Files(c.UserContext(), id)
		if err != nil {
			return err
		}
		return c.JSON(files)
	})
	v1.Get("/conversations/:id/sandbox/executions", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		list, err := s.files.Executions(c.UserContext(), id)
		if err != nil {
			return err
		}
		return c.JSON(list)
	})
	v1.Get("/files/:id", s.downloadFile)
	v1.Delete("/files/:id", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		if err := s.files.DeleteFile(c.UserContext(), id); err != nil {
			return err
		}
		return c.SendStatus(fiber.StatusNoContent)
	})
}

func (s *Server) execute(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	var in struct {
		Code      string `json:"code"`
		TimeoutMS *int64 `json:"timeout_ms"`
	}
	if err := decode(c, &in); err != nil {
		return err
	}
	if in.Code == "" {
		return sandchat.Errorf(sandchat.EINVALID, "code is required.")
	}
	var timeout time.Duration
	if in.TimeoutMS != nil {
		if *in.TimeoutMS <= 0 {
			return sandchat.Errorf(sandchat.EINVALID, "timeout_ms must be positive.")
		}
		// Past what a Duration holds it is past any limit: the engine says which.
		timeout = time.Duration(min(*in.TimeoutMS, math.MaxInt64/int64(time.Millisecond))) * time.Millisecond
	}
	// A caller who hung up gives up its place in the queue, and its run: nobody would
	// read the answer.
	ctx, stop := untilHangup(c)
	defer stop()
	run, err := s.sandbox.ExecuteDirect(ctx, id, in.Code, timeout)
	if err != nil {
		return err
	}
	return c.JSON(run)
}

// uploadFile stores a file for /data. Its path under /data is the form field "path"
// when given, else the file's name as sent, folders included (a browser sends
// "data/input.csv" for a file picked within a folder). An upload to a path that holds a
// file replaces it: 200 instead of 201.
func (s *Server) uploadFile(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	fh, err := c.FormFile("file")
	if err != nil {
		return sandchat.Errorf(sandchat.EINVALID, "Send the file as multipart/form-data in a field named \"file\".")
	}
	name := c.FormValue("path")
	if name == "" {
		name = sentFilename(fh)
	}
	if fh.Size > conversations.MaxUploadBytes {
		return conversations.UploadTooLarge(name, fh.Size)
	}
	f, err := fh.Open()
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, conversations.MaxUploadBytes+1))
	if err != nil {
		return err
	}
	ref, replaced, err := s.sandbox.UploadFile(c.UserContext(), id, name, fh.Header.Get(fiber.HeaderContentType), data)
	if err != nil {
		return err
	}
	if replaced {
		return c.JSON(ref)
	}
	return c.Status(fiber.StatusCreated).JSON(ref)
}

// sentFilename is the file name as the client sent it: the multipart reader keeps only
// its last element, which would drop the folders.
func sentFilename(fh *multipart.FileHeader) string {
	if _, params, err := mime.ParseMediaType(fh.Header.Get(fiber.HeaderContentDisposition)); err == nil && params["filename"] != "" {
		return params["filename"]
	}
	return fh.Filename
}

func (s *Server) downloadFile(c *fiber.Ctx) error {
	id, err := paramID(c, "id")
	if err != nil {
		return err
	}
	f, data, err := s.files.File(c.UserContext(), id)
	if err != nil {
		return err
	}
	// Files come from users and from untrusted code: never let a browser render them
	// as part of this origin.
	c.Set(fiber.HeaderContentType, f.ContentType)
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	c.Set(fiber.HeaderContentDisposition, mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(f.Name)}))
	c.Set(fiber.HeaderContentLength, strconv.Itoa(len(data)))
	return c.Send(data)
}
