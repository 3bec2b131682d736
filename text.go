package sandchat

import "unicode/utf8"

// TruncateUTF8 returns s if it is at most n bytes long; else its longest prefix of at
// most n bytes that does not split a character, followed by mark (which does not
// count against n). Where s is not UTF-8 (no character starts in the last bytes
// before n) it is cut at n. len(TruncateUTF8(s, i, "")) is the character boundary at
// or before i, for callers that cut a tail or split a stream.
func TruncateUTF8(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	i := n
	for i > 0 && n-i < utf8.UTFMax-1 && !utf8.RuneStart(s[i]) {
		i--
	}
	if !utf8.RuneStart(s[i]) {
		i = n
	}
	return s[:i] + mark
}
