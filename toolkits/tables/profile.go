package tables

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"io"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// records is one sheet's records, read once.
type records interface {
	// next returns the next record's first cells (at most Limits.MaxColumns) and its
	// whole width; the cells are valid until the next call. io.EOF ends the sheet.
	next() (cells [][]byte, width int, err error)
}

// knowing is a source that knows what some of its cells hold (a workbook's numbers and
// dates, by their cells' types and styles), so that the profile need not classify
// them again. Its knowns are those of the cells next gave last, one a cell; it is told
// only when it is profiled in place (not read ahead).
type knowing interface {
	knowns() []known
}

// keyed is a source that names its columns itself (JSON keys): it has no header row.
type keyed interface {
	names() []string
}

// sniffRows are the records read ahead to tell a header row from data.
const sniffRows = 20

// topValueBytes bounds a distinct value as kept for the most frequent ones; values are
// told apart by a hash of all their bytes.
const topValueBytes = 64

// scanSheet reads src to its end into sh: the profile of every column and the rows of
// the request's window. With ahead, src is read in a goroutine of its own
// (newRowsAhead), so that parsing and profiling use two cores; a source that is itself
// read ahead (a workbook's sheet, unpacked in a goroutine of its own) is profiled as it
// is parsed, its cells in place.
func scanSheet(ctx context.Context, src records, ahead bool, req Request, lim Limits, sh *Sheet) error {
	p := &profile{lim: lim, req: req, sh: sh, seed: maphash.MakeSeed()}
	sh.Offset, sh.Data = req.Offset, [][]string{}
	var names []string
	k, isKeyed := src.(keyed)
	kn, _ := src.(knowing)
	if ahead {
		ra := newRowsAhead(src)
		defer ra.close()
		src, kn = ra, nil
	}
	if isKeyed {
		sh.Header = true
	} else {
		// The records read ahead are held: at most sniffRows, and no more than one
		// record's bound in all.
		var head [][][]byte
		held := 0
		for len(head) < sniffRows && held < lim.MaxRecordBytes {
			cells, width, err := src.next()
			if err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			head = append(head, cloneCells(cells))
			for _, c := range cells {
				held += len(c)
			}
			sh.ColumnCount = max(sh.ColumnCount, width)
		}
		if sh.Header = looksLikeHeader(head); sh.Header {
			for _, c := range head[0] {
				names = append(names, clip(trim(c), lim.MaxCellBytes))
			}
			head = head[1:]
		}
		for _, cells := range head {
			p.add(cells, len(cells), nil)
		}
	}
	for n := 0; ; n++ {
		if n%8192 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		cells, width, err := src.next()
		if err == io.EOF {
			break
		} else if err != nil {
			return err
		}
		var knowns []known
		if kn != nil {
			knowns = kn.knowns()
		}
		p.add(cells, width, knowns)
	}
	if isKeyed {
		names = k.names() // the source has ended: its goroutine is done with it
	}
	p.finish(names)
	return nil
}

type profile struct {
	lim  Limits
	req  Request
	sh   *Sheet
	seed maphash.Seed
	cols []*colStats
}

// add profiles a row; knowns, when not nil, are what its cells are known to hold.
func (p *profile) add(cells [][]byte, width int, knowns []known) {
	sh := p.sh
	row := sh.Rows
	sh.Rows++
	sh.ColumnCount = max(sh.ColumnCount, width)
	for len(p.cols) < len(cells) {
		p.cols = append(p.cols, &colStats{})
	}
	if knowns != nil {
		for i, c := range cells {
			if kn := knowns[i]; kn.k != kNull {
				p.cols[i].add(c, kn, p) // a number or a date, without spaces
			} else {
				p.cols[i].add(trim(c), known{}, p)
			}
		}
	} else {
		for i, c := range cells {
			p.cols[i].add(trim(c), known{}, p)
		}
	}
	if row >= p.req.Offset && row-p.req.Offset < int64(p.req.Rows) {
		out := make([]string, len(cells))
		for i, c := range cells {
			out[i] = clip(c, p.lim.MaxCellBytes)
		}
		sh.Data = append(sh.Data, out)
	}
}

// colStats is one column's running profile.
type colStats struct {
	nonNull  int64
	kinds    [kText + 1]int64
	n        int64 // numbers seen, for the Welford mean and variance
	mean, m2 float64
	min, max float64
	tmin     int64 // wallSeconds, when dates > 0
	tmax     int64
	dates    int64     // dates and times seen
	ids      hashIndex // hash of a value -> its index in vals
	vals     []Count
	capped   bool
}

// add counts value b, of which kn (when not zero) says what classify would.
func (c *colStats) add(b []byte, kn known, p *profile) {
	k, f, t := kn.k, kn.v, int64(kn.v)
	if k == kNull {
		k, f, t = classify(b)
	}
	if k == kNull {
		return
	}
	c.nonNull++
	c.kinds[k]++
	switch k {
	case kInt, kFloat:
		if c.n == 0 || f < c.min {
			c.min = f
		}
		if c.n == 0 || f > c.max {
			c.max = f
		}
		c.n++
		d := f - c.mean
		c.mean += d / float64(c.n)
		c.m2 += d * (f - c.mean)
	case kDate, kDatetime:
		if c.dates == 0 || t < c.tmin {
			c.tmin = t
		}
		if c.dates == 0 || t > c.tmax {
			c.tmax = t
		}
		c.dates++
	}
	h := maphash.Bytes(p.seed, b)
	if i, ok := c.ids.find(h); ok {
		c.vals[i].Count++
	} else if len(c.vals) < p.lim.MaxDistinct {
		c.ids.insert(h, int32(len(c.vals)))
		c.vals = append(c.vals, Count{Value: clip(b, topValueBytes), Count: 1})
	} else {
		c.capped = true
	}
}

func (c *colStats) typ() string {
	k := c.kinds
	switch {
	case c.nonNull == 0:
		return TypeEmpty
	case k[kInt] == c.nonNull:
		return TypeInteger
	case k[kInt]+k[kFloat] == c.nonNull:
		return TypeFloat
	case k[kBool] == c.nonNull:
		return TypeBool
	case k[kDate] == c.nonNull:
		return TypeDate
	case k[kDate]+k[kDatetime] == c.nonNull:
		return TypeDatetime
	}
	return TypeText
}

func (p *profile) finish(names []string) {
	sh := p.sh
	sh.Columns = make([]Column, len(p.cols))
	for i, c := range p.cols {
		col := Column{Type: c.typ(), Nulls: sh.Rows - c.nonNull, Distinct: len(c.vals), DistinctCapped: c.capped}
		if i < len(names) && names[i] != "" {
			col.Name = names[i]
		} else {
			col.Name = fmt.Sprintf("column_%d", i+1)
		}
		switch col.Type {
		case TypeInteger:
			col.Min, col.Max = int64(c.min), int64(c.max)
		case TypeFloat:
			col.Min, col.Max = c.min, c.max
		case TypeDate:
			col.Min, col.Max = wallTime(c.tmin).Format(time.DateOnly), wallTime(c.tmax).Format(time.DateOnly)
		case TypeDatetime:
			col.Min, col.Max = wallTime(c.tmin).Format(time.DateTime), wallTime(c.tmax).Format(time.DateTime)
		case TypeText, TypeBool:
			top := slices.Clone(c.vals)
			slices.SortStableFunc(top, func(a, b Count) int { return int(min(max(b.Count-a.Count, -1), 1)) })
			col.Top = top[:min(len(top), p.lim.MaxTop)]
		}
		if col.Type == TypeInteger || col.Type == TypeFloat {
			mean := c.mean
			col.Mean = &mean
			if c.n > 1 {
				std := math.Sqrt(c.m2 / float64(c.n-1))
				col.Std = &std
			}
		}
		sh.Columns[i] = col
	}
	if len(names) > len(p.cols) && len(p.cols) < p.lim.MaxColumns {
		// A header wider than every data row: its columns are empty.
		for i := len(p.cols); i < min(len(names), p.lim.MaxColumns); i++ {
			sh.Columns = append(sh.Columns, Column{Name: names[i], Type: TypeEmpty, Nulls: sh.Rows})
		}
	}
	if sh.ColumnCount > len(sh.Columns) && sh.ColumnCount > p.lim.MaxColumns {
		sh.Notes = append(sh.Notes, fmt.Sprintf("%d columns; the first %d are described.", sh.ColumnCount, p.lim.MaxColumns))
	}
	for _, c := range sh.Columns {
		if c.DistinctCapped {
			sh.Notes = append(sh.Notes, fmt.Sprintf("Distinct values are counted up to %d per column; the most frequent values are those among them.", p.lim.MaxDistinct))
			break
		}
	}
}

// looksLikeHeader tells whether the first of head names the columns: its cells are
// distinct texts, and below it a column holds numbers, dates or booleans, or (all text)
// none of its names comes back in its column.
func looksLikeHeader(head [][][]byte) bool {
	if len(head) == 0 || len(head[0]) == 0 {
		return false
	}
	seen := map[string]bool{}
	for _, c := range head[0] {
		c = trim(c)
		if k, _, _ := classify(c); k != kText || seen[string(c)] {
			return false
		}
		seen[string(c)] = true
	}
	repeats := false
	for i, name := range head[0] {
		for _, r := range head[1:] {
			if i >= len(r) {
				continue
			}
			cell := trim(r[i])
			if k, _, _ := classify(cell); k != kText && k != kNull {
				return true
			}
			if bytes.Equal(cell, trim(name)) {
				repeats = true
			}
		}
	}
	return !repeats
}

func cloneCells(cells [][]byte) [][]byte {
	out := make([][]byte, len(cells))
	for i, c := range cells {
		out[i] = bytes.Clone(c)
	}
	return out
}

// clip is b as valid UTF-8 text of at most n bytes, marked when cut.
func clip(b []byte, n int) string {
	if len(b) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return strings.ToValidUTF8(string(b[:cut]), "\uFFFD") + "…"
	}
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// hashIndex maps a value's hash to its index among a column's distinct values: an
// open-addressing table (linear probing, at most half full), a fifth of the cost of a
// map lookup per cell, which every cell of a table pays.
type hashIndex struct {
	keys []uint64 // 0 is an empty slot
	idx  []int32
	n    int
}

// slotKey keeps 0 for empty slots.
func slotKey(h uint64) uint64 { return h | 1<<63 }

func (t *hashIndex) find(h uint64) (int32, bool) {
	if t.n == 0 {
		return 0, false
	}
	k, mask := slotKey(h), uint64(len(t.keys)-1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.idx[i], true
		case 0:
			return 0, false
		}
	}
}

func (t *hashIndex) insert(h uint64, v int32) {
	if 2*(t.n+1) > len(t.keys) {
		old, oldIdx := t.keys, t.idx
		size := max(16, 2*len(old))
		t.keys, t.idx, t.n = make([]uint64, size), make([]int32, size), 0
		for i, k := range old {
			if k != 0 {
				t.put(k, oldIdx[i])
			}
		}
	}
	t.put(slotKey(h), v)
}

func (t *hashIndex) put(k uint64, v int32) {
	mask := uint64(len(t.keys) - 1)
	i := k & mask
	for t.keys[i] != 0 {
		i = (i + 1) & mask
	}
	t.keys[i], t.idx[i] = k, v
	t.n++
}
