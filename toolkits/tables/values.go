package tables

import (
	"bytes"
	"math"
	"strconv"
	"time"
	"unsafe"
)

// kind is what one cell holds.
type kind int

const (
	kNull kind = iota
	kInt
	kFloat
	kBool
	kDate
	kDatetime
	kText
)

// nulls are the spellings of a missing value that tools commonly write.
var nulls = map[string]bool{"": true, "na": true, "n/a": true, "nan": true, "null": true, "none": true, "nil": true, "#n/a": true, "-": true}

// dateLayouts and datetimeLayouts are tried in order; a slash date is read month
// first, as Excel's US default and pandas do.
var (
	dateLayouts     = []string{"2006-01-02", "2006/01/02", "1/2/2006", "2.1.2006"}
	datetimeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04",
		"2006-01-02 15:04:05Z07:00", "2006/01/02 15:04:05", "1/2/2006 15:04:05", "1/2/2006 15:04"}
)

// classify says what the (trimmed) cell b holds, with its number or time.
func classify(b []byte) (kind, float64, time.Time) {
	if len(b) <= 4 && nulls[string(bytes.ToLower(b))] {
		return kNull, 0, time.Time{}
	}
	if n, ok := parseInt(b); ok {
		return kInt, float64(n), time.Time{}
	}
	if f, ok := parseFloat(b); ok {
		return kFloat, f, time.Time{}
	}
	if len(b) >= 2 && len(b) <= 5 {
		switch string(bytes.ToLower(b)) {
		case "true", "false", "yes", "no":
			return kBool, 0, time.Time{}
		}
	}
	if len(b) >= 8 && len(b) <= 40 && b[0] >= '0' && b[0] <= '9' {
		s := unsafe.String(&b[0], len(b)) // parsing keeps no reference to s
		for _, l := range dateLayouts {
			if t, err := time.Parse(l, s); err == nil {
				return kDate, 0, t
			}
		}
		for _, l := range datetimeLayouts {
			if t, err := time.Parse(l, s); err == nil {
				return kDatetime, 0, t
			}
		}
	}
	return kText, 0, time.Time{}
}

func parseInt(b []byte) (int64, bool) {
	i := 0
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		i = 1
	}
	if i == len(b) || len(b)-i > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b[i:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if b[0] == '-' {
		n = -n
	}
	return n, true
}

// parseFloat reads plain decimal numbers only: no hex, no underscores, no "inf" or
// "nan" (JSON cannot carry them, and a column of them is not a number column).
func parseFloat(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) > 40 {
		return 0, false
	}
	digit := false
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			digit = true
		case c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E':
		default:
			return 0, false
		}
	}
	if !digit {
		return 0, false
	}
	f, err := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// trim is bytes.TrimSpace for the ASCII spaces and line ends that pad cells.
func trim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}
