package frontendapi

import (
	"strings"
	"testing"
)

// TestFramePolicy: a display frame may run inline script and the vendored Plotly that
// frame.html loads, and reach nothing else; the page keeps its own scripts only and
// allows its frames.
func TestFramePolicy(t *testing.T) {
	doc, err := web.ReadFile("web/frame.html")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), `src="`+plotlyScript+`"`) {
		t.Errorf("frame.html does not load %s, which its policy allows", plotlyScript)
	}
	if _, err := web.ReadFile("web" + plotlyScript); err != nil {
		t.Errorf("%s is not vendored: %v", plotlyScript, err)
	}
	for host, want := range map[string]string{
		"127.0.0.1:8080":     "script-src 'unsafe-inline' 127.0.0.1:8080" + plotlyScript + ";",
		"chat.example.com":   "script-src 'unsafe-inline' chat.example.com" + plotlyScript + ";",
		"evil; script-src *": "script-src 'unsafe-inline';",
	} {
		p := frameCSP(host)
		if !strings.Contains(p, want) || !strings.HasPrefix(p, "default-src 'none';") || strings.Count(p, "'self'") != 1 {
			t.Errorf("host %q: policy %q, want %q", host, p, want)
		}
	}
	if !strings.Contains(webCSP, "script-src 'self';") || !strings.Contains(webCSP, "frame-src 'self';") {
		t.Errorf("page policy %q", webCSP)
	}
}
