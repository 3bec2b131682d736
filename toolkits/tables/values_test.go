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
