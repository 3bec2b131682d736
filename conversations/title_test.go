package conversations

import "testing"

func TestTitleFrom(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, content, want string }{
		{"first line", "Plot the sales\nfrom last year", "Plot the sales"},
		{"markdown marks", "## Budget *review*", "Budget *review*"},
		{"prose after code", "```python\nx = 1\n```\nwhat is x?", "what is x?"},
		{"only code", "```python\nprint('hi')\n```", "print('hi')"},
		{"long cut at a word", "please read the file that I uploaded and tell me what the columns mean for us", "please read the file that I uploaded and tell me what the…"},
		{"blank", "   ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := TitleFrom(tc.content); got != tc.want {
				t.Fatalf("TitleFrom(%q) = %q, want %q", tc.content, got, tc.want)
			}
		})
	}
}
