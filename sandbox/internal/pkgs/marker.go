package pkgs

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MarkerEnv is how a Pyodide session of the given Python version answers PEP 508
// environment markers.
func MarkerEnv(python string) map[string]string {
	full := python
	if full == "" {
		full = "3.14.0"
	}
	short := full
	if r := releaseOf(full); len(r) >= 2 {
		short = fmt.Sprintf("%d.%d", r[0], r[1])
	}
	return map[string]string{
		"python_version": short, "python_full_version": full, "implementation_version": full,
		"sys_platform": "emscripten", "platform_system": "Emscripten", "os_name": "posix",
		"platform_machine": "wasm32", "implementation_name": "cpython",
		"platform_python_implementation": "CPython", "platform_release": "", "platform_version": "",
		"extra": "",
	}
}

var markerToken = regexp.MustCompile(`\s*(\(|\)|'[^']*'|"[^"]*"|===|==|!=|<=|>=|~=|<|>|not\s+in\b|in\b|and\b|or\b|[A-Za-z_][A-Za-z0-9_.]*)`)

// EvalMarker evaluates a PEP 508 marker (and, or, parentheses, comparisons of
// variables and quoted strings); anything else is an error.
func EvalMarker(m string, env map[string]string) (bool, error) {
	var toks []string
	rest := m
	for strings.TrimSpace(rest) != "" {
		loc := markerToken.FindStringSubmatchIndex(rest)
		if loc == nil || loc[0] != 0 {
			return false, fmt.Errorf("marker %q", m)
		}
		toks = append(toks, strings.Join(strings.Fields(rest[loc[2]:loc[3]]), " "))
		rest = rest[loc[1]:]
	}
	i := 0
	var expr func() (bool, error)
	value := func() (string, bool, error) {
		if i >= len(toks) {
			return "", false, errors.New("marker ends early")
		}
		t := toks[i]
		i++
		if len(t) >= 2 && (t[0] == '\'' || t[0] == '"') {
			return t[1 : len(t)-1], false, nil
		}
		v, ok := env[t]
		if !ok {
			return "", false, fmt.Errorf("marker variable %q", t)
		}
		return v, t == "python_version" || t == "python_full_version" || t == "implementation_version", nil
	}
	atom := func() (bool, error) {
		if i < len(toks) && toks[i] == "(" {
			i++
			v, err := expr()
			if err != nil || i >= len(toks) || toks[i] != ")" {
				return false, errors.New("marker parentheses")
			}
			i++
			return v, nil
		}
		l, lv, err := value()
		if err != nil {
			return false, err
		}
		if i >= len(toks) {
			return false, errors.New("marker ends early")
		}
		op := toks[i]
		i++
		r, rv, err := value()
		if err != nil {
			return false, err
		}
		if op == "in" || op == "not in" {
			return strings.Contains(r, l) == (op == "in"), nil
		}
		c := strings.Compare(l, r)
		if lv || rv {
			c = CompareVersions(l, r)
		}
		switch op {
		case "==", "===":
			return c == 0, nil
		case "!=":
			return c != 0, nil
		case "<":
			return c < 0, nil
		case "<=":
			return c <= 0, nil
		case ">":
			return c > 0, nil
		case ">=":
			return c >= 0, nil
		case "~=":
			return c >= 0, nil
		}
		return false, fmt.Errorf("marker operator %q", op)
	}
	and := func() (bool, error) {
		v, err := atom()
		for err == nil && i < len(toks) && toks[i] == "and" {
			i++
			var w bool
			w, err = atom()
			v = v && w
		}
		return v, err
	}
	expr = func() (bool, error) {
		v, err := and()
		for err == nil && i < len(toks) && toks[i] == "or" {
			i++
			var w bool
			w, err = and()
			v = v || w
		}
		return v, err
	}
	v, err := expr()
	if err == nil && i != len(toks) {
		err = fmt.Errorf("marker %q", m)
	}
	return v, err
}
