package redisbus

import "time"

// SetClock makes the limiter read the time from now, so a test can turn the window.
func SetClock(l *Limiter, now func() time.Time) { l.now = now }
