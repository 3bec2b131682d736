package tables

import (
	"io"
	"sync"
)

// readAhead reads r in a goroutine of its own, a few buffers ahead of its reader, so
// that unpacking a part and reading what it unpacked use both of a machine's cores.
// Close stops the goroutine; it must be called.
type readAhead struct {
	full chan []byte // buffers read, in order; closed after the last one
	free chan []byte
	done chan struct{}
	wg   sync.WaitGroup
	err  error // r's error, set before full is closed

	cur  []byte // what is left of the buffer being read
	last []byte // that buffer, to give back
}

func newReadAhead(r io.Reader, size, count int) *readAhead {
	ra := &readAhead{full: make(chan []byte, count), free: make(chan []byte, count), done: make(chan struct{})}
	for range count {
		ra.free <- make([]byte, size)
	}
	ra.wg.Add(1)
	go func() {
		defer ra.wg.Done()
		defer close(ra.full)
		for {
			var b []byte
			select {
			case b = <-ra.free:
			case <-ra.done:
				return
			}
			n, err := io.ReadFull(r, b[:cap(b)])
			if n > 0 {
				select {
				case ra.full <- b[:n]:
				case <-ra.done:
					return
				}
			}
			if err != nil {
				if err == io.ErrUnexpectedEOF {
					err = io.EOF
				}
				ra.err = err
				return
			}
		}
	}()
	return ra
}

func (ra *readAhead) Read(p []byte) (int, error) {
	for len(ra.cur) == 0 {
		if ra.last != nil {
			ra.free <- ra.last[:cap(ra.last)]
			ra.last = nil
		}
		b, ok := <-ra.full
		if !ok {
			return 0, ra.err
		}
		ra.cur, ra.last = b, b
	}
	n := copy(p, ra.cur)
	ra.cur = ra.cur[n:]
	return n, nil
}

// Close stops the reading and waits for the goroutine, which may be inside r.Read.
func (ra *readAhead) Close() {
	close(ra.done)
	ra.wg.Wait()
}
