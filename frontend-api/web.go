package frontendapi

import (
	"embed"
	"path"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/sandchat/sandchat"
)

//go:embed web
var web embed.FS

// The page's scripts and styles come from this origin only; the socket too. Images may
// also be blob: URLs, which is how the page shows artifacts it fetched with its token.
const webCSP = "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data: blob:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

var webTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".mjs":  "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

func (s *Server) webRoutes() {
	send := func(c *fiber.Ctx, name string) error {
		contentType, ok := webTypes[path.Ext(name)]
		if !ok || strings.Contains(name, "..") {
			return sandchat.Errorf(sandchat.ENOTFOUND, "No such page.")
		}
		body, err := web.ReadFile("web/" + name)
		if err != nil {
			return sandchat.Errorf(sandchat.ENOTFOUND, "No such page.")
		}
		c.Set(fiber.HeaderContentType, contentType)
		c.Set("Content-Security-Policy", webCSP)
		c.Set("X-Content-Type-Options", "nosniff")
		c.Set("Referrer-Policy", "no-referrer")
		c.Set(fiber.HeaderCacheControl, "no-cache")
		return c.Send(body)
	}
	s.app.Get("/", func(c *fiber.Ctx) error { return send(c, "index.html") })
	s.app.Get("/app.js", func(c *fiber.Ctx) error { return send(c, "app.js") })
	s.app.Get("/app.css", func(c *fiber.Ctx) error { return send(c, "app.css") })
	// The client's modules, which app.js imports.
	s.app.Get("/js/:name", func(c *fiber.Ctx) error { return send(c, "js/"+c.Params("name")) })
	// Vendored libraries, pinned by the version in their file names (see web/vendor/README.md).
	s.app.Get("/vendor/:name", func(c *fiber.Ctx) error { return send(c, "vendor/"+c.Params("name")) })
}
