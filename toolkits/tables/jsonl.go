package tables

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"hash/maphash"
	"io"
)

func scanJSONL(ctx context.Context, r io.ReaderAt, size int64, req Request, lim Limits, t *Table) error {
	text, enc, err := decode(r, size, req.Name)
	if err != nil {
		return err
	}
	t.Encoding = enc
	src := &jsonlReader{r: bufio.NewReaderSize(text, headBytes), maxBytes: lim.MaxRecordBytes, maxCols: lim.MaxColumns,
		maxName: lim.MaxCellBytes, index: map[uint64]int{}, seed: maphash.MakeSeed()}
	t.Sheets = append(t.Sheets, Sheet{})
	return scanSheet(ctx, src, true, req, lim, &t.Sheets[0])
}

// maxExtraKeys bounds the keys past Limits.MaxColumns that are counted.
const maxExtraKeys = 1 << 16

// jsonlReader reads one JSON object per line. Its columns are the objects' keys in the
// order they first appear; a key an object lacks is a null there. Strings are their
// text, numbers and booleans as written, nested objects and arrays their JSON.
type jsonlReader struct {
	r        *bufio.Reader
	maxBytes int
	maxCols  int
	line     int64
	keys     []string       // the described columns' names, clipped
	index    map[uint64]int // a key's hash -> its column: keys are told apart by all their bytes, kept by none
	width    int            // keys seen, the ones past maxCols included (counted up to maxExtraKeys)
	extra    map[uint64]bool
	seed     maphash.Seed
	maxName  int
	buf      []byte
	cells    [][]byte
}

func (j *jsonlReader) names() []string { return j.keys }

func (j *jsonlReader) next() ([][]byte, int, error) {
	for {
		line, err := j.readLine()
		if err != nil {
			return nil, 0, err
		}
		if line = trim(line); len(line) == 0 {
			continue
		}
		return j.parse(line)
	}
}

func (j *jsonlReader) readLine() ([]byte, error) {
	j.buf = j.buf[:0]
	j.line++
	for {
		chunk, err := j.r.ReadSlice('\n')
		if len(j.buf)+len(chunk) > j.maxBytes {
			return nil, errorf(Malformed, "Line %d is longer than %d bytes; this is not a table this tool reads.", j.line, j.maxBytes)
		}
		j.buf = append(j.buf, chunk...)
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(j.buf) > 0:
			return j.buf, nil
		case err != nil:
			if err == io.EOF {
				return nil, io.EOF
			}
			return nil, readError(err)
		}
		return j.buf, nil
	}
}

func (j *jsonlReader) parse(line []byte) ([][]byte, int, error) {
	bad := func() ([][]byte, int, error) {
		return nil, 0, errorf(Malformed, "Line %d is not a JSON object; a JSON Lines file has one object per line.", j.line)
	}
	if line[0] != '{' || !json.Valid(line) {
		return bad()
	}
	// Keys in the order the line writes them, so columns come in the file's order.
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil {
		return bad()
	}
	for i := range j.cells {
		j.cells[i] = nil
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bad()
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return bad()
		}
		h := maphash.String(j.seed, key)
		i, ok := j.index[h]
		if !ok {
			if len(j.keys) >= j.maxCols {
				if j.extra == nil {
					j.extra = map[uint64]bool{}
				}
				if !j.extra[h] && len(j.extra) < maxExtraKeys {
					j.extra[h] = true
					j.width++
				}
				continue
			}
			i = len(j.keys)
			j.index[h] = i
			j.keys = append(j.keys, clip([]byte(key), j.maxName))
			j.width++
		}
		for len(j.cells) <= i {
			j.cells = append(j.cells, nil)
		}
		j.cells[i] = cellOf(raw)
	}
	return j.cells, j.width, nil
}

func cellOf(raw json.RawMessage) []byte {
	raw = trim(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return nil
	case raw[0] == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return raw
		}
		return []byte(s)
	}
	return raw
}
