package pkgs

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Wheel file names and the tags that say which interpreters load them (PEP 425, 427):
// name-version(-build)?-python-abi-platform.whl, each tag a dot-separated set.

var (
	wheelName = regexp.MustCompile(`^[A-Za-z0-9._+-]{1,200}\.whl$`)
	hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// Platform is what a session's interpreter loads: its CPython version and the platform
// tags of the compiled wheels built for it, best first.
type Platform struct {
	Major, Minor int
	Tags         []string // e.g. pyemscripten_2026_0_wasm32 (PEP 783), pyodide_2026_0_wasm32
}

// NewPlatform reads a Pyodide lock file's info: its Python version, ABI version (such
// as 2026_0), architecture and Emscripten version (emscripten_5_0_3).
func NewPlatform(python, abi, arch, emscripten string) Platform {
	p := Platform{Major: 3, Minor: 14}
	if r := releaseOf(python); len(r) >= 2 {
		p.Major, p.Minor = r[0], r[1]
	}
	if arch == "" {
		arch = "wasm32"
	}
	if abi != "" {
		// PEP 783's name first, then the one Pyodide used before it.
		p.Tags = append(p.Tags, "pyemscripten_"+abi+"_"+arch, "pyodide_"+abi+"_"+arch)
	}
	if emscripten != "" {
		p.Tags = append(p.Tags, emscripten+"_"+arch)
	}
	return p
}

// CPython is the interpreter tag, such as cp314.
func (p Platform) CPython() string { return fmt.Sprintf("cp%d%d", p.Major, p.Minor) }

func (p Platform) String() string {
	if len(p.Tags) == 0 {
		return p.CPython()
	}
	return p.CPython() + ", " + p.Tags[0]
}

// WheelTags are the parts of a wheel's file name.
type WheelTags struct {
	Name, Version      string
	Python, ABI, Plats []string
}

// ParseWheelName splits a wheel's file name; ok is false for anything else: a name
// whose parts are not all there ("----.whl"), whose build tag does not start with a
// digit, or whose tag sets hold an empty tag.
func ParseWheelName(file string) (WheelTags, bool) {
	if !wheelName.MatchString(file) || filepath.Base(file) != file {
		return WheelTags{}, false
	}
	parts := strings.Split(strings.TrimSuffix(file, ".whl"), "-")
	if len(parts) != 5 && len(parts) != 6 || slices.Contains(parts, "") || len(parts) == 6 && (parts[2][0] < '0' || parts[2][0] > '9') {
		return WheelTags{}, false
	}
	n := len(parts)
	t := WheelTags{Name: parts[0], Version: parts[1],
		Python: strings.Split(parts[n-3], "."), ABI: strings.Split(parts[n-2], "."), Plats: strings.Split(parts[n-1], ".")}
	for _, set := range [][]string{t.Python, t.ABI, t.Plats} {
		if slices.Contains(set, "") {
			return WheelTags{}, false
		}
	}
	return t, true
}

// Rank tells how well a wheel suits p: -1 when p cannot load it, 0 for pure Python,
// more for a wheel built for p (the more specific its ABI, the more). A resolver takes
// the highest, as pip does: a compiled wheel wins over a pure-Python one.
func (p Platform) Rank(file string) int {
	t, ok := ParseWheelName(file)
	if !ok {
		return -1
	}
	best := -1
	for _, plat := range t.Plats {
		platScore := -1
		if plat == "any" {
			platScore = 0
		}
		for i, want := range p.Tags {
			if plat == want {
				platScore = 10 * (len(p.Tags) - i)
				break
			}
		}
		if platScore < 0 {
			continue
		}
		for _, py := range t.Python {
			for _, abi := range t.ABI {
				s := p.interpreterScore(py, abi)
				if s < 0 {
					continue
				}
				if plat == "any" {
					s = 0 // pure Python: any ABI-free build loads, none is better than another
				}
				best = max(best, platScore+s)
			}
		}
	}
	return best
}

// interpreterScore rates a python and ABI tag pair for p, -1 when it does not load.
func (p Platform) interpreterScore(py, abi string) int {
	cp := p.CPython()
	switch {
	case abi == strings.ToLower(cp) && py == cp:
		return 3
	case abi == "abi3" && strings.HasPrefix(py, "cp"):
		// The stable ABI of any earlier 3.x loads.
		major, minor, ok := pyVersion(strings.TrimPrefix(py, "cp"))
		if ok && major == p.Major && minor <= p.Minor {
			return 2
		}
	case abi == "none":
		if py == cp || py == fmt.Sprintf("py%d", p.Major) || py == fmt.Sprintf("py%d%d", p.Major, p.Minor) {
			return 1
		}
		// py3x for an earlier x: code written for an older Python 3 runs.
		if major, minor, ok := pyVersion(strings.TrimPrefix(py, "py")); ok && major == p.Major && minor <= p.Minor {
			return 1
		}
	}
	return -1
}

// pyVersion reads "314" as 3.14 and "3" as 3.0.
func pyVersion(s string) (int, int, bool) {
	if s == "" {
		return 0, 0, false
	}
	major, err := strconv.Atoi(s[:1])
	if err != nil {
		return 0, 0, false
	}
	if len(s) == 1 {
		return major, 0, true
	}
	minor, err := strconv.Atoi(s[1:])
	return major, minor, err == nil
}
