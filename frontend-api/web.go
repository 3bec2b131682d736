package frontendapi

import (
	"embed"

	"github.com/gofiber/fiber/v2"
)

//go:embed web
var web embed.FS

// The page's scripts and styles come from this origin only; the socket too.
const webCSP = "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

func (s *Server) webRoutes() {
	serve := func(path, name, contentType string) {
		s.app.Get(path, func(c *fiber.Ctx) error {
			body, err := web.ReadFile("web/" + name)
			if err != nil {
				return err
			}
			c.Set(fiber.HeaderContentType, contentType)
			c.Set("Content-Security-Policy", webCSP)
			c.Set("X-Content-Type-Options", "nosniff")
			c.Set(fiber.HeaderCacheControl, "no-cache")
			return c.Send(body)
		})
	}
	serve("/", "index.html", "text/html; charset=utf-8")
	serve("/app.js", "app.js", "text/javascript; charset=utf-8")
	serve("/app.css", "app.css", "text/css; charset=utf-8")
	// DOMPurify 3.4.18 (npm dompurify, dist/purify.min.js; Apache-2.0 or MPL-2.0, see
	// web/vendor/DOMPurify-LICENSE): sanitizes the HTML and SVG of display items.
	serve("/vendor/purify.min.js", "vendor/purify.min.js", "text/javascript; charset=utf-8")
}
