package tables

import (
	"io"
	"sync"
)

// rowsAhead reads a records source in a goroutine of its own, a few batches of rows
// ahead of the profile, so that parsing a file and profiling its cells use both of a
// machine's cores. Rows are copied into batches bounded in rows, cells and bytes. close
// stops the goroutine; it must be called.
type rowsAhead struct {
	full chan *rowBatch // closed after the batch that ends the source
	free chan *rowBatch
	done chan struct{}
	wg   sync.WaitGroup

	cur *rowBatch
	row int // the next row of cur
}

type rowBatch struct {
	buf   []byte    // the cells' bytes, end to end
	ends  []int32   // where each cell ends in buf
	rows  []rowSpan // each row's cells among ends, and its width
	cells [][]byte  // ends as slices of buf, once the batch is full
	err   error     // what ended the source after these rows (io.EOF at its end)
}

type rowSpan struct{ from, to, width int32 }

// Bounds of one batch, past which no row starts; a row is bounded by Limits.
const (
	batchRows  = 4096
	batchCells = 16 << 10
	batchBytes = 512 << 10
	batches    = 3
)

func newRowsAhead(src records) *rowsAhead {
	ra := &rowsAhead{full: make(chan *rowBatch, batches), free: make(chan *rowBatch, batches), done: make(chan struct{})}
	for range batches {
		ra.free <- &rowBatch{buf: make([]byte, 0, 2*batchBytes), ends: make([]int32, 0, 2*batchCells), cells: make([][]byte, 0, 2*batchCells), rows: make([]rowSpan, 0, batchRows)}
	}
	ra.wg.Add(1)
	go func() {
		defer ra.wg.Done()
		defer close(ra.full)
		for {
			var b *rowBatch
			select {
			case b = <-ra.free:
			case <-ra.done:
				return
			}
			b.fill(src)
			select {
			case ra.full <- b:
			case <-ra.done:
				return
			}
			if b.err != nil {
				return
			}
		}
	}()
	return ra
}

// fill reads rows from src into b until one of its bounds is passed or src ends.
func (b *rowBatch) fill(src records) {
	buf, ends, rows := b.buf[:0], b.ends[:0], b.rows[:0]
	b.err = nil
	for len(rows) < batchRows && len(ends) < batchCells && len(buf) < batchBytes {
		cells, width, err := src.next()
		if err != nil {
			b.err = err
			break
		}
		from := int32(len(ends))
		for _, c := range cells {
			buf = append(buf, c...)
			ends = append(ends, int32(len(buf)))
		}
		rows = append(rows, rowSpan{from: from, to: int32(len(ends)), width: int32(width)})
	}
	cells, start := b.cells[:0], int32(0)
	for _, e := range ends {
		cells = append(cells, buf[start:e:e])
		start = e
	}
	b.buf, b.ends, b.rows, b.cells = buf, ends, rows, cells
}

func (ra *rowsAhead) next() ([][]byte, int, error) {
	for ra.cur == nil || ra.row == len(ra.cur.rows) {
		if ra.cur != nil {
			if ra.cur.err != nil {
				return nil, 0, ra.cur.err
			}
			ra.free <- ra.cur
		}
		b, ok := <-ra.full
		if !ok {
			return nil, 0, io.ErrUnexpectedEOF // stopped: not reached after close
		}
		ra.cur, ra.row = b, 0
	}
	r := ra.cur.rows[ra.row]
	ra.row++
	return ra.cur.cells[r.from:r.to], int(r.width), nil
}

// close stops the reading and waits for the goroutine, which may be inside src.next.
func (ra *rowsAhead) close() {
	close(ra.done)
	ra.wg.Wait()
}
