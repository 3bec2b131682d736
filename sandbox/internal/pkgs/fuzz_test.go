package pkgs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// Fuzz targets for what a session or a package index may send the engine: requirements
// (PEP 508) and versions (PEP 440) from micropip.install, environment markers, wheel
// file names and the index's JSON. Each holds, whatever the text, that parsing ends
// without a panic and what it answers is consistent. Their seed corpora are in
// testdata/fuzz; `make fuzz` runs each for a few seconds.

var fuzzPlatform = NewPlatform("3.14.0", "2026_0", "wasm32", "emscripten_5_0_3")

// FuzzRequirement: a requirement as micropip.install passes it, and a version checked
// against it.
func FuzzRequirement(f *testing.F) {
	for _, s := range []string{"numpy", "Pandas[excel, sql] (>=2.0,<3); python_version >= '3.9'", "a.b-c_d ~= 1.4.2", "x ===1.0+local",
		"x == 1.*", "x != 2.0rc1, > 1", "bad name", "x @ https://example.com/x.whl", "x>=", "(>=1)"} {
		f.Add(s, "1.4.3")
	}
	f.Add("x >= 1.0a1", "1.0.dev0")
	f.Add("x < v2!3.0.post1", "2!2.9")
	f.Fuzz(func(t *testing.T, s, v string) {
		r, err := ParseRequirement(s)
		if err != nil {
			if pe := (*Error)(nil); !errors.As(err, &pe) {
				t.Fatalf("%q: an error that is not the package error: %T %v", s, err, err)
			}
			return
		}
		if !ValidName(r.Name) || Normalize(Normalize(r.Name)) != Normalize(r.Name) {
			t.Fatalf("%q: name %q", s, r.Name)
		}
		r.SatisfiedBy(v) // ends, whatever v is
		again, err := ParseRequirement(r.Name + " " + r.Spec)
		if err != nil || again.Spec != r.Spec || len(again.specs) != len(r.specs) {
			t.Fatalf("%q: its name and specifiers (%q %q) read back as %+v, %v", s, r.Name, r.Spec, again, err)
		}
	})
}

// FuzzCompareVersions: versions, as an index lists them, are ordered: each is equal to
// itself, and two are ordered the same way whichever comes first; sorting them by it
// (as resolve does) ends.
func FuzzCompareVersions(f *testing.F) {
	for _, p := range [][3]string{{"1.0", "1.0.0", "1.0a1"}, {"2!1.0", "1.10", "1.9"}, {"1.0.post1", "1.0+local", "v1.0"}, {"1.0rc1", "1.0c1", "1.0.dev3"}, {"", "0", "01"}} {
		f.Add(p[0], p[1], p[2])
	}
	f.Fuzz(func(t *testing.T, a, b, c string) {
		for _, x := range []string{a, b, c} {
			if CompareVersions(x, x) != 0 {
				t.Fatalf("%q is not equal to itself", x)
			}
		}
		for _, p := range [][2]string{{a, b}, {b, c}, {a, c}} {
			if CompareVersions(p[0], p[1]) != -CompareVersions(p[1], p[0]) {
				t.Fatalf("%q and %q are ordered differently as given each way round", p[0], p[1])
			}
		}
		if CompareVersions(a, b) < 0 && CompareVersions(b, c) < 0 && CompareVersions(a, c) >= 0 {
			t.Fatalf("%q < %q < %q, but not %q < %q", a, b, c, a, c)
		}
	})
}

// FuzzMarker: a PEP 508 environment marker of any text, as an index's requires_dist
// holds them.
func FuzzMarker(f *testing.F) {
	for _, m := range []string{`python_version >= "3.9" and sys_platform != "win32"`, `extra == "test"`, `(os_name == 'posix' or platform_machine in 'x86_64 aarch64') and not_a_var < '1'`,
		`implementation_name == "cpython" and python_full_version ~= "3.14.0"`, `"emscripten" in sys_platform`, `((((`, `'unclosed`} {
		f.Add(m)
	}
	env := MarkerEnv("3.14.0")
	f.Fuzz(func(t *testing.T, m string) {
		v1, err1 := EvalMarker(m, env)
		v2, err2 := EvalMarker(m, env)
		if v1 != v2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("%q: %v %v, then %v %v", m, v1, err1, v2, err2)
		}
	})
}

// FuzzWheelName: a wheel's file name, as an index lists it: parsed into its tags, and
// ranked for the session's interpreter; a name that does not parse never ranks.
func FuzzWheelName(f *testing.F) {
	for _, w := range []string{"numpy-2.2.0-cp314-cp314-pyemscripten_2026_0_wasm32.whl", "six-1.16.0-py2.py3-none-any.whl", "x-1-1build-cp312-abi3-pyodide_2026_0_wasm32.whl",
		"x-1.0-py3-none-manylinux_2_17_x86_64.whl", "../x-1-py3-none-any.whl", "x-1-cp3-none-any.whl", "x.whl"} {
		f.Add(w)
	}
	f.Fuzz(func(t *testing.T, file string) {
		tags, ok := ParseWheelName(file)
		rank := fuzzPlatform.Rank(file)
		switch {
		case rank < -1:
			t.Fatalf("%q: rank %d", file, rank)
		case !ok && rank != -1:
			t.Fatalf("%q does not parse, yet ranks %d", file, rank)
		case ok && (tags.Name == "" && tags.Version == "" || len(tags.Python) == 0 || len(tags.ABI) == 0 || len(tags.Plats) == 0 || strings.Contains(file, "/")):
			t.Fatalf("%q parsed as %+v", file, tags)
		}
	})
}

// FuzzIndexJSON: a package index's answer for a project, of any bytes, and the
// requirement it is asked for: what resolve picks is a release the requirement allows,
// a wheel the interpreter loads with a usable hash and name, and dependencies that parse.
func FuzzIndexJSON(f *testing.F) {
	good := `{"info": {"name": "demo", "version": "1.2.0", "requires_dist": ["six (>=1.0)", "pytest; extra == \"test\"", "tzdata; sys_platform == \"win32\""]},
"releases": {"1.2.0": [{"filename": "demo-1.2.0-py3-none-any.whl", "url": "https://files/demo-1.2.0-py3-none-any.whl", "digests": {"sha256": "` + strings.Repeat("ab", 32) + `"}, "size": 10}],
"1.3.0rc1": [{"filename": "demo-1.3.0rc1-cp314-cp314-pyemscripten_2026_0_wasm32.whl", "digests": {"sha256": "` + strings.Repeat("cd", 32) + `"}}],
"1.1": [{"filename": "demo-1.1-cp314-cp314-manylinux_2_17_x86_64.whl", "digests": {"sha256": "00"}, "yanked": true}]}}`
	f.Add([]byte(good), "demo>=1.0")
	f.Add([]byte(good), "demo>=1.3.0rc1")
	f.Add([]byte(`{"info": {"version": "1"}, "urls": [{"filename": "x-1-py3-none-any.whl", "digests": {"sha256": "`+strings.Repeat("0", 64)+`"}, "size": -1}]}`), "x")
	f.Add([]byte(`{"releases": {"1": null, "": [{}]}}`), "x<2")
	f.Fuzz(func(t *testing.T, doc []byte, req string) {
		r, err := ParseRequirement(req)
		if err != nil {
			return
		}
		var d indexDoc
		if json.Unmarshal(doc, &d) != nil {
			return
		}
		w, err := fuzzPlatform.pick(&d, r)
		if err != nil {
			if pe := (*Error)(nil); !errors.As(err, &pe) {
				t.Fatalf("%T %v", err, err)
			}
			return
		}
		if !r.SatisfiedBy(w.Version) || fuzzPlatform.Rank(w.File) < 0 || !hexSHA256.MatchString(w.SHA256) || !wheelName.MatchString(w.File) || w.Size < 0 || w.Name == "" {
			t.Fatalf("%q picked %+v", req, w)
		}
		for _, dep := range dependencies(d.Info.RequiresDist, MarkerEnv("3.14.0")) {
			if !ValidName(dep.Name) {
				t.Fatalf("dependency %+v", dep)
			}
		}
	})
}
