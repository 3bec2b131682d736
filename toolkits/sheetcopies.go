package toolkits

import (
	"bytes"
	"context"
	"maps"
	"strconv"
	"strings"

	"github.com/sandchat/sandchat"
	"github.com/sandchat/sandchat/conversations"
	"github.com/sandchat/sandchat/sandbox"
	"github.com/sandchat/sandchat/toolkits/tables"
)

// Each sheet of an uploaded workbook is mounted beside it as CSV (sales.xlsx →
// /data/sales.xlsx.d/Sheet1.csv), so Python's standard library and pandas.read_csv read
// Excel where openpyxl cannot be fetched. The copies are made from the workbook's bytes
// when a session's process does not hold them yet, and travel like uploads: a copy's
// version is its workbook's with the copy's size after copyMark, so a process that holds
// the workbook holds its copies too, and their sizes are known without their bytes.
const (
	copyDir  = ".d/"
	copyMark = "+csv:"
	// maxCopiedWorkbook: larger workbooks get no copies (making them would slow the
	// run they come with); maxCopyBytes bounds one workbook's copies.
	maxCopiedWorkbook = 2 << 20
	maxCopyBytes      = 16 << 20
)

// SheetCopyPath is where the CSV copy of a workbook's sheet is under /data, or "" when
// the workbook or the sheet gets none.
func SheetCopyPath(workbook string, size int64, sheet string) string {
	if tables.FormatOf(workbook) != tables.XLSX || size > maxCopiedWorkbook {
		return ""
	}
	p := workbook + copyDir + sheet + ".csv"
	if sandchat.CheckDataPath(p) != nil {
		return ""
	}
	return p
}

// workbooksHeldWithoutCopies tells whether a process holds some workbook (its bytes are
// not in uploads) but none of its copies: their bytes must then be read again.
func workbooksHeldWithoutCopies(uploads []conversations.DataFile, have map[string]string) bool {
	for _, f := range uploads {
		if f.Data != nil || f.Size > maxCopiedWorkbook || tables.FormatOf(f.Name) != tables.XLSX {
			continue
		}
		held := false
		for name, v := range have {
			held = held || strings.HasPrefix(name, f.Name+copyDir) && strings.HasPrefix(v, f.Version+copyMark)
		}
		if !held {
			return true
		}
	}
	return false
}

// withoutWorkbooks is have without the workbooks, so their bytes come again.
func withoutWorkbooks(have map[string]string) map[string]string {
	out := maps.Clone(have)
	for name := range out {
		if tables.FormatOf(name) == tables.XLSX {
			delete(out, name)
		}
	}
	return out
}

// sheetCopies are the copies of the workbooks among uploads, within room bytes: from
// have for a workbook the process holds, made from its bytes otherwise. A workbook whose
// folder the user uploaded into, a sheet whose copy would pass room, or one that could
// not be read gets no copy (a truncated copy would pass for the whole sheet).
func (s *Sandbox) sheetCopies(ctx context.Context, uploads []conversations.DataFile, have map[string]string, room int64) []sandbox.File {
	taken := map[string]bool{}
	for _, f := range uploads {
		for p := f.Name; ; {
			taken[p] = true
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				break
			}
			p = p[:i]
		}
	}
	var out []sandbox.File
	for _, f := range uploads {
		if tables.FormatOf(f.Name) != tables.XLSX || f.Size > maxCopiedWorkbook || taken[strings.TrimSuffix(f.Name+copyDir, "/")] {
			continue
		}
		if f.Data == nil {
			for name, v := range have {
				if strings.HasPrefix(name, f.Name+copyDir) && strings.HasPrefix(v, f.Version+copyMark) {
					size, _ := strconv.ParseInt(strings.TrimPrefix(v, f.Version+copyMark), 10, 64)
					out = append(out, sandbox.File{Name: name, Version: v, Size: size})
					room -= size
				}
			}
			continue
		}
		copies, err := tables.SheetCSVs(ctx, bytes.NewReader(f.Data), int64(len(f.Data)), f.Name, tables.DefaultLimits, int(min(room, maxCopyBytes)))
		if err != nil {
			s.log().InfoContext(ctx, "no CSV copies of a workbook", "name", f.Name, "err", err)
			continue
		}
		for _, c := range copies {
			p := SheetCopyPath(f.Name, f.Size, c.Sheet)
			if c.Truncated || p == "" || taken[p] {
				continue
			}
			out = append(out, sandbox.File{Name: p, Version: f.Version + copyMark + strconv.Itoa(len(c.CSV)), Size: int64(len(c.CSV)), Data: c.CSV})
			room -= int64(len(c.CSV))
		}
	}
	return out
}
