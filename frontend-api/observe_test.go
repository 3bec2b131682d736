package frontendapi

import "testing"

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"/api/v1/ws":                                 "/api/v1/ws",
		"/api/v1/ws?access_token=sct_secret":         "/api/v1/ws?access_token=REDACTED",
		"/api/v1/files/3?download=1&access_token=x":  "/api/v1/files/3?access_token=REDACTED&download=1",
		"/api/v1/ws?since=4":                         "/api/v1/ws?since=4",
		"/api/v1/ws?access_token=a&access_token=b":   "/api/v1/ws?access_token=REDACTED",
		"/api/v1/ws?%zz&access_token=sct_secret":     "/api/v1/ws?(unparsed query)",
		"/api/v1/ws?ACCESS_TOKEN=kept-as-not-a-name": "/api/v1/ws?ACCESS_TOKEN=kept-as-not-a-name",
		"/api/v1/files/3?ticket=sctk_secret":         "/api/v1/files/3?ticket=REDACTED",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRequestID(t *testing.T) {
	for _, sane := range []string{"a", "req-1.2_3:4", "0123456789abcdef0123456789abcdef"} {
		if got := requestID(sane); got != sane {
			t.Errorf("requestID(%q) = %q: a sane id is kept", sane, got)
		}
	}
	for _, bad := range []string{"", "two words", "a\nb", "é", string(make([]byte, maxRequestID+1))} {
		if got := requestID(bad); got == bad || len(got) != 32 {
			t.Errorf("requestID(%q) = %q: want a new one", bad, got)
		}
	}
}
