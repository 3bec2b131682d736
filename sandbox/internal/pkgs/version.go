package pkgs

import (
	"regexp"
	"strconv"
	"strings"
)

// Requirements (PEP 508: a name, version specifiers, a marker) and versions (PEP 440,
// ordered by release numbers, a pre-release before its release).

var (
	projectName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$`)
	requirement = regexp.MustCompile(`^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*\(?\s*([^;()]*?)\s*\)?\s*(?:;(.*))?$`)
	preTag      = regexp.MustCompile(`(?i)(a|b|c|rc|alpha|beta|pre|preview|dev)\d*`)
)

// Normalize is a project's name as PEP 503 compares it.
func Normalize(name string) string {
	return strings.ToLower(strings.NewReplacer("_", "-", ".", "-").Replace(name))
}

// Requirement is one parsed requirement: URLs and local files are not supported.
type Requirement struct {
	Name   string
	Spec   string // the specifiers as written
	Marker string // PEP 508 environment marker, "" for none
	specs  [][2]string
}

// ParseRequirement reads a requirement such as "name[extra] (>=1.0,<2); marker".
func ParseRequirement(s string) (Requirement, error) {
	if len(s) > 500 || strings.Contains(s, "@") || strings.Contains(s, "://") {
		return Requirement{}, Errorf("requirement %.80q is not supported: give a name with optional version specifiers (URLs and local files are not)", s)
	}
	m := requirement.FindStringSubmatch(s)
	if m == nil || !projectName.MatchString(m[1]) {
		return Requirement{}, Errorf("requirement %.80q is not a project name with optional version specifiers", s)
	}
	r := Requirement{Name: m[1], Spec: strings.TrimSpace(m[3]), Marker: strings.TrimSpace(m[4])}
	if r.Spec != "" {
		for _, part := range strings.Split(r.Spec, ",") {
			part = strings.TrimSpace(part)
			op := ""
			for _, o := range []string{"===", "~=", "==", "!=", "<=", ">=", "<", ">"} {
				if strings.HasPrefix(part, o) {
					op = o
					break
				}
			}
			v := strings.TrimSpace(strings.TrimPrefix(part, op))
			if op == "" || v == "" {
				return Requirement{}, Errorf("version specifier %q of %s is not supported", part, r.Name)
			}
			r.specs = append(r.specs, [2]string{op, v})
		}
	}
	return r, nil
}

// SatisfiedBy applies the specifiers; pre-releases only count when a specifier names one.
func (r Requirement) SatisfiedBy(v string) bool {
	pre := isPre(v)
	for _, s := range r.specs {
		op, want := s[0], s[1]
		if isPre(want) {
			pre = false
		}
		c := CompareVersions(v, strings.TrimSuffix(want, ".*"))
		switch op {
		case "==", "===":
			if strings.HasSuffix(want, ".*") {
				if !strings.HasPrefix(v+".", strings.TrimSuffix(want, "*")) {
					return false
				}
			} else if c != 0 {
				return false
			}
		case "!=":
			if c == 0 {
				return false
			}
		case "<=":
			if c > 0 {
				return false
			}
		case ">=":
			if c < 0 {
				return false
			}
		case "<":
			if c >= 0 {
				return false
			}
		case ">":
			if c <= 0 {
				return false
			}
		case "~=":
			// ~=1.4.2 means >=1.4.2, ==1.4.*
			rel := releaseOf(want)
			if c < 0 || len(rel) < 2 || compareInts(releaseOf(v)[:min(len(releaseOf(v)), len(rel)-1)], rel[:len(rel)-1]) != 0 {
				return false
			}
		}
	}
	return !pre
}

func isPre(v string) bool { return preTag.MatchString(v) }

func releaseOf(v string) []int {
	v = strings.TrimPrefix(strings.ToLower(v), "v")
	if i := strings.Index(v, "!"); i >= 0 {
		v = v[i+1:]
	}
	var out []int
	for _, p := range strings.Split(v, ".") {
		j := 0
		for j < len(p) && p[j] >= '0' && p[j] <= '9' {
			j++
		}
		if j == 0 {
			break
		}
		n, _ := strconv.Atoi(p[:j])
		out = append(out, n)
		if j < len(p) {
			break
		}
	}
	return out
}

func compareInts(a, b []int) int {
	for i := range max(len(a), len(b)) {
		x, y := 0, 0
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// CompareVersions orders PEP 440 versions by their release numbers, a pre-release
// before its release; local and post parts only break ties as text.
func CompareVersions(a, b string) int {
	if c := compareInts(releaseOf(a), releaseOf(b)); c != 0 {
		return c
	}
	if pa, pb := isPre(a), isPre(b); pa != pb {
		if pa {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

// ValidName tells a project name as PEP 508 allows it.
func ValidName(name string) bool { return projectName.MatchString(name) }
