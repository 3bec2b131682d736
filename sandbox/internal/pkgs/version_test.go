package pkgs

import (
	"strings"
	"testing"
)

func TestEvalMarker(t *testing.T) {
	t.Parallel()
	env := MarkerEnv("3.14.2")
	markers := map[string]bool{
		"extra == 'test'":                                                  false,
		"sys_platform == 'win32'":                                          false,
		"sys_platform == 'emscripten'":                                     true,
		"python_version >= '3.8'":                                          true,
		"python_version < '3.10' or platform_system != 'Windows'":          true,
		"(python_version < '3.10' or extra == 'x') and os_name == 'posix'": false,
		"platform_machine in 'x86_64 wasm32'":                              true,
	}
	for m, want := range markers {
		if got, err := EvalMarker(m, env); err != nil || got != want {
			t.Errorf("%s: got %v, %v; want %v", m, got, err, want)
		}
	}
}

func TestRequirement(t *testing.T) {
	t.Parallel()
	specs := map[string][]string{ // requirement -> versions it accepts, of 1.0 1.4.2 1.5 2.0 2.1rc1
		"x":           {"1.0", "1.4.2", "1.5", "2.0"},
		"x==1.5":      {"1.5"},
		"x>=1.4.2,<2": {"1.4.2", "1.5"},
		"x~=1.4":      {"1.4.2", "1.5"},
		"x!=2.0,>1.0": {"1.4.2", "1.5"},
		"x (<=1.4.2)": {"1.0", "1.4.2"},
		"x==2.1rc1":   {"2.1rc1"},
		"x==1.*":      {"1.0", "1.4.2", "1.5"},
	}
	for s, want := range specs {
		r, err := ParseRequirement(s)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		var got []string
		for _, v := range []string{"1.0", "1.4.2", "1.5", "2.0", "2.1rc1"} {
			if r.SatisfiedBy(v) {
				got = append(got, v)
			}
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: got %v, want %v", s, got, want)
		}
	}
	for _, bad := range []string{"x @ https://evil.example/x.whl", "../x"} {
		if _, err := ParseRequirement(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
