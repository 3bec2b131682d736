package pkgs

import "testing"

// TestWheelRank: which wheels a Pyodide 3.14 interpreter loads, and which it prefers.
func TestWheelRank(t *testing.T) {
	t.Parallel()
	p := NewPlatform("3.14.2", "2026_0", "wasm32", "emscripten_5_0_3")
	tests := []struct {
		file string
		want int // -1: does not load; 0: pure Python; more: built for the platform
	}{
		{"a-1.0-py3-none-any.whl", 0},
		{"a-1.0-py2.py3-none-any.whl", 0},
		{"a-1.0-py2-none-any.whl", -1},
		{"a-1.0-cp314-cp314-pyemscripten_2026_0_wasm32.whl", 33},
		{"a-1.0-cp314-cp314-pyodide_2026_0_wasm32.whl", 23},
		{"a-1.0-cp314-cp314-emscripten_5_0_3_wasm32.whl", 13},
		{"a-1.0-cp312-abi3-pyemscripten_2026_0_wasm32.whl", 32},
		{"a-1.0-py3-none-pyemscripten_2026_0_wasm32.whl", 31},
		{"a-1.0-cp313-cp313-pyemscripten_2025_0_wasm32.whl", -1},
		{"a-1.0-cp313-cp313-pyemscripten_2026_0_wasm32.whl", -1},
		{"a-1.0-cp314-cp314-manylinux_2_17_x86_64.whl", -1},
		{"a-1.0-cp315-abi3-pyemscripten_2026_0_wasm32.whl", -1},
		{"a-1.0-1-cp314-cp314-pyemscripten_2026_0_wasm32.whl", 33},
		{"../a-1.0-py3-none-any.whl", -1},
		{"a-py3-none-any.whl", -1},
	}
	for _, tt := range tests {
		if got := p.Rank(tt.file); got != tt.want {
			t.Errorf("%s: rank %d, want %d", tt.file, got, tt.want)
		}
	}
}

// TestParseWheelName: a wheel's name has all its parts, a build tag that starts with a
// digit, and no empty tag (FuzzWheelName found "----.whl" read as a wheel of no name).
func TestParseWheelName(t *testing.T) {
	t.Parallel()
	for _, file := range []string{"a-1.0-py3-none-any.whl", "a-1.0-1b-py2.py3-none-any.whl"} {
		if _, ok := ParseWheelName(file); !ok {
			t.Errorf("%s: not read", file)
		}
	}
	for _, file := range []string{"----.whl", "a-1.0--none-any.whl", "-1.0-py3-none-any.whl", "a-1.0-py3.-none-any.whl", "a-1.0-py3-none-.any.whl", "a-1.0-x1-py3-none-any.whl"} {
		if tags, ok := ParseWheelName(file); ok {
			t.Errorf("%s: read as %+v", file, tags)
		}
	}
}
