package tables

import (
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
	if len(b) == 0 {
		return kNull, 0, time.Time{}
	}
	if c := b[0]; c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' {
		if n, ok := parseInt(b); ok {
			return kInt, float64(n), time.Time{}
		}
		if f, ok := parseFloat(b); ok {
			return kFloat, f, time.Time{}
		}
		if t, ok := isoDate(b); ok {
			return kDate, 0, t
		}
		if len(b) >= 8 && len(b) <= 40 && c >= '0' && c <= '9' {
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
	}
	if len(b) <= 5 {
		var low [5]byte
		for i, c := range b {
			if c >= 'A' && c <= 'Z' {
				c += 'a' - 'A'
			}
			low[i] = c
		}
		w := low[:len(b)]
		if nulls[string(w)] {
			return kNull, 0, time.Time{}
		}
		switch string(w) {
		case "true", "false", "yes", "no":
			return kBool, 0, time.Time{}
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

// parseFloat reads plain decimal numbers only: sign, digits, a point, an exponent; no
// hex, no underscores, no "inf" or "nan" (JSON cannot carry them, and a column of them
// is not a number column). Short ones are computed exactly here, the rest by strconv.
func parseFloat(b []byte) (float64, bool) {
	if len(b) == 0 || len(b) > 40 {
		return 0, false
	}
	i := 0
	if b[0] == '-' || b[0] == '+' {
		i++
	}
	var mant uint64
	digits, frac, point := 0, 0, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= '0' && c <= '9':
			mant = mant*10 + uint64(c-'0')
			digits++
			if point {
				frac++
			}
			continue
		case c == '.' && !point:
			point = true
			continue
		}
		break
	}
	if digits == 0 {
		return 0, false
	}
	if i == len(b) && digits <= 15 {
		f := float64(mant) / pow10[frac]
		if b[0] == '-' {
			f = -f
		}
		return f, true
	}
	if i < len(b) {
		// Only an exponent may follow.
		if b[i] != 'e' && b[i] != 'E' {
			return 0, false
		}
		i++
		if i < len(b) && (b[i] == '-' || b[i] == '+') {
			i++
		}
		if i == len(b) {
			return 0, false
		}
		for ; i < len(b); i++ {
			if b[i] < '0' || b[i] > '9' {
				return 0, false
			}
		}
	}
	f, err := strconv.ParseFloat(unsafe.String(&b[0], len(b)), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// pow10 are the powers of ten a float64 holds exactly.
var pow10 = [...]float64{1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15}

// isoDate reads YYYY-MM-DD, the commonest date, without time.Parse.
func isoDate(b []byte) (time.Time, bool) {
	if len(b) != 10 || b[4] != '-' || b[7] != '-' {
		return time.Time{}, false
	}
	num := func(p []byte) int {
		n := 0
		for _, c := range p {
			if c < '0' || c > '9' {
				return -1
			}
			n = n*10 + int(c-'0')
		}
		return n
	}
	y, m, d := num(b[:4]), num(b[5:7]), num(b[8:])
	if y < 0 || m < 1 || m > 12 || d < 1 || d > 31 {
		return time.Time{}, false
	}
	t := time.Date(y, time.Month(m), d, 0, 0, 0, 0, time.UTC)
	if t.Day() != d { // 2023-02-30 is no date
		return time.Time{}, false
	}
	return t, true
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
