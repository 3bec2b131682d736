package tables

import (
	"io"
	"sync"
)

// readAhead reads r in a goroutine of its own, a few buffers ahead of its reader, so
// that unpacking a part and reading what it unpacked use both of a machine's cores. The
// reader takes the buffers in place (next), without a copy. close stops the goroutine;
// it must be called.
type readAhead struct {
	full     chan *aheadBuf // buffers read, in order; closed after the last one
	free     chan *aheadBuf
	done     chan struct{}
	wg       sync.WaitGroup
	err      error // r's error, set before full is closed
	headroom int

	last *aheadBuf // the buffer the reader holds
}

// aheadBuf holds n bytes read after headroom bytes left for the end of the buffer read
// before it.
type aheadBuf struct {
	buf []byte
	n   int
}

func newReadAhead(r io.Reader, size, headroom, count int) *readAhead {
	ra := &readAhead{full: make(chan *aheadBuf, count), free: make(chan *aheadBuf, count), done: make(chan struct{}), headroom: headroom}
	for range count {
		ra.free <- &aheadBuf{buf: make([]byte, headroom+size)}
	}
	ra.wg.Add(1)
	go func() {
		defer ra.wg.Done()
		defer close(ra.full)
		for {
			var b *aheadBuf
			select {
			case b = <-ra.free:
			case <-ra.done:
				return
			}
			var err error
			b.n, err = io.ReadFull(r, b.buf[headroom:])
			if b.n > 0 {
				select {
				case ra.full <- b:
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

// next returns what was read next, with keep (the unread end of what next returned
// before, at most the headroom) in front of it; io.EOF after the last.
func (ra *readAhead) next(keep []byte) ([]byte, error) {
	if len(keep) > ra.headroom {
		return nil, errXMLTooLong
	}
	b, ok := <-ra.full
	if !ok {
		return nil, ra.err
	}
	start := ra.headroom - len(keep)
	copy(b.buf[start:], keep)
	if ra.last != nil {
		ra.free <- ra.last
	}
	ra.last = b
	return b.buf[start : ra.headroom+b.n], nil
}

// Close stops the reading and waits for the goroutine, which may be inside r.Read.
func (ra *readAhead) Close() {
	close(ra.done)
	ra.wg.Wait()
}
