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
// Its only frames are display items' (frame.html).
const webCSP = "default-src 'self'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data: blob:; frame-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'; object-src 'none'"

// plotlyScript is the vendored Plotly that frame.html loads for Plotly figures.
const plotlyScript = "/vendor/plotly-4.1.2.min.js"

// frameCSP is the policy of a display item's frame, whose HTML and scripts are
// Python's: inline scripts and styles, data: images and the vendored Plotly, and no
// network at all. The page embeds it sandboxed without allow-same-origin, so what runs
// there has an opaque origin: it cannot reach the page, its storage or its cookies.
// Only the page may embed it. A source with a path needs the host, which is the
// request's own (or, when that is not a plain host, Plotly is left out).
func frameCSP(host string) string {
	plotly := ""
	if validHost(host) {
		plotly = " " + host + plotlyScript
	}
	return "default-src 'none'; script-src 'unsafe-inline'" + plotly + "; style-src 'unsafe-inline'; img-src data: blob:; font-src data:; " +
		"frame-ancestors 'self'; base-uri 'none'; form-action 'none'"
}

func validHost(h string) bool {
	if h == "" || len(h) > 255 {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-:[]", r)) {
			return false
		}
	}
	return true
}

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
		if name == "frame.html" {
			c.Set("Content-Security-Policy", frameCSP(string(c.Request().Host())))
			// Links are never resolved ahead: DNS would carry their host names out.
			c.Set("X-DNS-Prefetch-Control", "off")
		} else {
			c.Set("Content-Security-Policy", webCSP)
		}
		c.Set("X-Content-Type-Options", "nosniff")
		c.Set("Referrer-Policy", "no-referrer")
		if strings.HasPrefix(name, "vendor/") {
			// Named by their exact version: they never change under their name.
			c.Set(fiber.HeaderCacheControl, "public, max-age=31536000, immutable")
		} else {
			c.Set(fiber.HeaderCacheControl, "no-cache")
		}
		return c.Send(body)
	}
	s.app.Get("/", func(c *fiber.Ctx) error { return send(c, "index.html") })
	// A login link's page: the same client, which exchanges the link's fragment.
	s.app.Get("/login", func(c *fiber.Ctx) error { return send(c, "index.html") })
	s.app.Get("/app.js", func(c *fiber.Ctx) error { return send(c, "app.js") })
	s.app.Get("/app.css", func(c *fiber.Ctx) error { return send(c, "app.css") })
	s.app.Get("/frame.html", func(c *fiber.Ctx) error { return send(c, "frame.html") })
	// The client's modules, which app.js imports.
	s.app.Get("/js/:name", func(c *fiber.Ctx) error { return send(c, "js/"+c.Params("name")) })
	// Vendored libraries, pinned by the version in their file names (see web/vendor/README.md).
	s.app.Get("/vendor/:name", func(c *fiber.Ctx) error { return send(c, "vendor/"+c.Params("name")) })
}
