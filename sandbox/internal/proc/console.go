package proc

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// consoleLog takes a session process's stdout and stderr, which user code can write to:
// it keeps the last few KiB for error reports and logs a bounded number of lines a
// minute, so a session can neither fill the disk nor flood the server's logs.
type consoleLog struct {
	log    *slog.Logger
	mu     sync.Mutex
	last   []byte
	window time.Time
	lines  int
}

const consoleKeep = 4 << 10

func (c *consoleLog) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = append(c.last, b...)
	if len(c.last) > consoleKeep {
		c.last = append([]byte(nil), c.last[len(c.last)-consoleKeep:]...)
	}
	if time.Since(c.window) > time.Minute {
		c.window, c.lines = time.Now(), 0
	}
	for _, line := range bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n")) {
		if c.lines++; c.lines <= 20 {
			c.log.Debug("sandbox process console", "line", string(line[:min(len(line), 500)]))
		}
	}
	return len(b), nil
}

// tail is the end of the console, for an error message.
func (c *consoleLog) tail() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.TrimSpace(string(c.last))
	if s == "" {
		return ""
	}
	if len(s) > 1000 {
		s = s[len(s)-1000:]
	}
	return " (process said: " + s + ")"
}
