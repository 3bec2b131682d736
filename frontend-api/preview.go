package frontendapi

import (
	"context"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/toolkits/tables"
)

// TablePreviewer reads a conversation's file as a table (toolkits.Tables): the same
// reads the data analysis tool gives the model.
type TablePreviewer interface {
	Preview(ctx context.Context, convID, fileID int64, sheet string, offset int64, rows int) (*tables.Table, error)
}

// previewRoutes: GET /conversations/{id}/files/{file_id}/preview?sheet=&offset=&rows=
// gives one sheet's rows with its columns' types; viewers too, 404 for others.
func (s *Server) previewRoutes(v1 fiber.Router) {
	v1.Get("/conversations/:id/files/:file_id/preview", func(c *fiber.Ctx) error {
		id, err := paramID(c, "id")
		if err != nil {
			return err
		}
		fileID, err := paramID(c, "file_id")
		if err != nil {
			return err
		}
		if s.tables == nil {
			return sandchat.Errorf(sandchat.EUNAVAILABLE, "Table previews are not configured on this server.")
		}
		offset, rows := int64(0), 0
		if v := c.Query("offset"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return sandchat.Errorf(sandchat.EINVALID, "offset must be a whole number of at least 0.")
			}
			offset = n
		}
		if v := c.Query("rows"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > tables.DefaultLimits.MaxRows {
				return sandchat.Errorf(sandchat.EINVALID, "rows must be between 1 and %d.", tables.DefaultLimits.MaxRows)
			}
			rows = n
		}
		t, err := s.tables.Preview(c.UserContext(), id, fileID, c.Query("sheet"), offset, rows)
		if err != nil {
			return err
		}
		return c.JSON(t)
	})
}
