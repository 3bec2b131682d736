package tables

import (
	"math"
	"strconv"
	"time"
	"unsafe"
)

// kind is what one cell holds.
type kind uint8

const (
	kNull kind = iota
	kInt
	kFloat
	kBool
	kDate
	kDatetime
	kText
)

// known is what a cell holds as classify says it, when reading the cell told it: a
// workbook's number cell, its number; a date cell, its day. The zero known tells
// nothing.
type known struct {
	v float64 // the number; or the date or time as classify's seconds (below 2⁵³: exact)
	k kind
}

// dateLayouts and datetimeLayouts are tried in order; a slash date is read month
// first, as Excel's US default and pandas do.
var (
	dateLayouts     = []string{"2006-01-02", "2006/01/02", "1/2/2006", "2.1.2006"}
	datetimeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04",
		"2006-01-02 15:04:05Z07:00", "2006/01/02 15:04:05", "1/2/2006 15:04:05", "1/2/2006 15:04"}
)

// classify says what the (trimmed) cell b holds, with its number, or its date or time
// as seconds from 1970-01-01 00:00 of the clock it was written in (an offset is not
// applied: 10:00+02:00 is 10:00).
func classify(b []byte) (kind, float64, int64) {
	if len(b) == 0 {
		return kNull, 0, 0
	}
	if c := b[0]; c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' {
		if n, ok := parseInt(b); ok {
			return kInt, float64(n), 0
		}
		if f, ok := parseFloat(b); ok {
			return kFloat, f, 0
		}
		if t, ok := isoDate(b); ok {
			return kDate, 0, t
		}
		if len(b) >= 8 && len(b) <= 40 && c >= '0' && c <= '9' {
			s := unsafe.String(&b[0], len(b)) // parsing keeps no reference to s
			for _, l := range dateLayouts {
				if t, err := time.Parse(l, s); err == nil {
					return kDate, 0, wallSeconds(t)
				}
			}
			for _, l := range datetimeLayouts {
				if t, err := time.Parse(l, s); err == nil {
					return kDatetime, 0, wallSeconds(t)
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
		// The spellings of a missing value that tools commonly write, and of booleans.
		switch string(low[:len(b)]) {
		case "na", "n/a", "nan", "null", "none", "nil", "#n/a", "-":
			return kNull, 0, 0
		case "true", "false", "yes", "no":
			return kBool, 0, 0
		}
	}
	return kText, 0, 0
}

// wallSeconds is t as seconds from 1970-01-01 00:00 of its own clock.
func wallSeconds(t time.Time) int64 {
	_, offset := t.Zone()
	return t.Unix() + int64(offset)
}

// wallTime is the time wallSeconds gave s for.
func wallTime(s int64) time.Time { return time.Unix(s, 0).UTC() }

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

// isoDate reads YYYY-MM-DD, the commonest date, without time.Parse: as wallSeconds.
func isoDate(b []byte) (int64, bool) {
	if len(b) != 10 || b[4] != '-' || b[7] != '-' {
		return 0, false
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
	if y < 0 || m < 1 || m > 12 || d < 1 || d > daysIn(y, m) { // 2023-02-30 is no date
		return 0, false
	}
	return civilDays(y, m, d) * 86400, true
}

func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// civilDays is the number of days from 1970-01-01 to y-m-d (Howard Hinnant's
// days_from_civil), for years from 0.
func civilDays(y, m, d int) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 {
		era = (y - 399) / 400
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return int64(era)*146097 + int64(doe) - 719468
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
