package tables

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestCivilDays: ISO dates read without time.Parse are the days time.Date counts, and
// days that do not exist are no dates.
func TestCivilDays(t *testing.T) {
	t.Parallel()
	for d := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() < 10000; d = d.AddDate(0, 0, 3) {
		got, ok := isoDate(fmt.Appendf(nil, "%04d-%02d-%02d", d.Year(), d.Month(), d.Day()))
		if !ok || got != d.Unix() {
			t.Fatalf("%s: %d %v, want %d", d.Format(time.DateOnly), got, ok, d.Unix())
		}
	}
	for _, s := range []string{"2023-02-29", "2024-04-31", "2024-13-01", "2024-00-10", "1900-02-29"} {
		if _, ok := isoDate([]byte(s)); ok {
			t.Errorf("%s read as a date", s)
		}
	}
	if _, ok := isoDate([]byte("2024-02-29")); !ok {
		t.Error("2024-02-29 is a date")
	}
}

// TestHashIndex: the distinct values' table finds what a map finds.
func TestHashIndex(t *testing.T) {
	t.Parallel()
	var h hashIndex
	want := map[uint64]int32{}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 5000 {
		k := rng.Uint64() >> rng.IntN(64) // small keys too, and 0
		if _, ok := want[k]; !ok && i%2 == 0 {
			want[k] = int32(len(want))
			h.insert(k, want[k])
		}
		v, ok := h.find(k)
		if w, wok := want[k]; ok != wok || v != w {
			t.Fatalf("key %d: %d %v, want %d %v", k, v, ok, w, wok)
		}
	}
}

// TestKnownsAreClassify: what reading a workbook's cell says it holds (a plain number,
// a serial date as its style shows it) is what classify says of the value it shows.
func TestKnownsAreClassify(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	check := func(v []byte, kn known) {
		t.Helper()
		k, f, sec := classify(v)
		want := known{k: k, v: f}
		if k == kDate || k == kDatetime {
			want.v = float64(sec)
		}
		if kn != want {
			t.Fatalf("%q: known %+v, classify %+v", v, kn, want)
		}
	}
	for range 200000 {
		var v []byte
		if rng.IntN(2) == 0 {
			v = fmt.Append(nil, rng.Int64N(1<<(1+rng.IntN(52)))*int64(1-2*rng.IntN(2)))
		} else {
			v = fmt.Append(nil, float64(rng.Int64N(1<<(1+rng.IntN(50))))/float64(int64(1)<<rng.IntN(30))*float64(1-2*rng.IntN(2)))
		}
		if kn := plainNumber(v); kn.k != kNull {
			check(v, kn)
		}
	}
	for _, v := range []string{"0", "-1", "0.5", "-0.25", "123456789012345", "99999999999999.9", "1.00000000000001"} {
		kn := plainNumber([]byte(v))
		if kn.k == kNull {
			t.Fatalf("%s is a plain number", v)
		}
		check([]byte(v), kn)
	}
	for range 100000 {
		f := rng.Float64() * maxSerial
		for _, k := range []kind{kDate, kDatetime, kText} {
			v, kn, ok := appendSerialKnown(nil, f, k, rng.IntN(2) == 0)
			if ok {
				check(v, kn)
			}
		}
	}
}
