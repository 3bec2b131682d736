package sandbox

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sandchat/sandchat"
)

// TestSettingsDeclaredOnce: every field of Config is one setting's (but the two the
// server fills from settings of its own), and no field is two settings'; each setting
// names its variable, says what it is, and its default is the one DefaultConfig gives.
func TestSettingsDeclaredOnce(t *testing.T) {
	notSettings := map[string]string{
		"RedisPrefix": "SANDCHAT_REDIS_PREFIX, the server's",
		"PipOff":      "SANDCHAT_SANDBOX_PIP=off, the server's",
	}
	fields := map[string]string{} // field -> the variable that fills it
	def := DefaultConfig()
	for _, s := range Settings() {
		if !strings.HasPrefix(s.Env, "SANDBOX_") || strings.TrimSpace(s.Help) == "" || s.Set == nil || s.Kind == "" {
			t.Errorf("SANDCHAT_%s: a sandbox setting needs the SANDBOX_ prefix, help, a parser and a kind", s.Env)
			continue
		}
		field := fieldOf(t, s)
		if field == "" {
			t.Errorf("SANDCHAT_%s fills no field of Config", s.Env)
			continue
		}
		if other, ok := fields[field]; ok {
			t.Errorf("Config.%s is filled by SANDCHAT_%s and %s", field, s.Env, other)
		}
		fields[field] = "SANDCHAT_" + s.Env
		var fromDef Config
		if s.Def != "" {
			if err := s.Parse(&fromDef, s.Def); err != nil {
				t.Errorf("the default of SANDCHAT_%s: %v", s.Env, err)
			}
		}
		if got, want := flatField(fromDef, field), flatField(def, field); !reflect.DeepEqual(got.Interface(), want.Interface()) {
			t.Errorf("SANDCHAT_%s's default gives %v, DefaultConfig %v", s.Env, got, want)
		}
	}
	for _, name := range flatFields(reflect.TypeFor[Config]()) {
		if _, ok := fields[name]; !ok && notSettings[name] == "" {
			t.Errorf("Config.%s is no setting's: declare it in Settings", name)
		}
	}
	if err := def.Validate(); err != nil {
		t.Fatalf("the defaults do not pass: %v", err)
	}
}

// TestSettingsRefuseOutOfBounds: a value past a setting's bounds, given as text or set
// by a program, is refused by Validate with the setting's variable named.
func TestSettingsRefuseOutOfBounds(t *testing.T) {
	past := map[sandchat.Kind]string{sandchat.KindWholeNumber: "9000000000", sandchat.KindSize: "1000000GiB", sandchat.KindDuration: "1000000h"}
	for _, s := range Settings() {
		raw, ok := past[s.Kind]
		if !ok || s.Bounds == nil {
			continue
		}
		t.Run(s.Env, func(t *testing.T) {
			c := DefaultConfig()
			if err := s.Parse(&c, raw); err != nil {
				if strings.Contains(err.Error(), "too large") {
					return
				}
				t.Fatal(err)
			}
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), "SANDCHAT_"+s.Env+": ") {
				t.Fatalf("%s=%s: %v, want a refusal naming it", s.Env, raw, err)
			}
		})
	}
}

// fieldOf finds the field of Config that s fills: the one that differs between a
// Config set from s's default (or a probe value) and the zero Config.
func fieldOf(t *testing.T, s Setting) string {
	probes := map[sandchat.Kind]string{sandchat.KindText: "probe", sandchat.KindBoolean: "true", sandchat.KindWholeNumber: "7",
		sandchat.KindSize: "7", sandchat.KindDuration: "7s", sandchat.KindList: "probe"}
	for _, raw := range []string{probes[s.Kind], s.Def} {
		var c Config
		if raw == "" || s.Set(&c, raw) != nil {
			continue
		}
		var changed []string
		zero := Config{}
		for _, name := range flatFields(reflect.TypeFor[Config]()) {
			if !reflect.DeepEqual(flatField(c, name).Interface(), flatField(zero, name).Interface()) {
				changed = append(changed, name)
			}
		}
		if len(changed) == 1 {
			return changed[0]
		}
		if len(changed) > 1 {
			t.Errorf("SANDCHAT_%s fills %v", s.Env, changed)
			return ""
		}
	}
	return ""
}

// flatFields names the fields of Config, those of an embedded struct as its own.
func flatFields(ty reflect.Type) []string {
	var out []string
	for i := range ty.NumField() {
		f := ty.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, flatFields(f.Type)...)
			continue
		}
		if f.IsExported() {
			out = append(out, f.Name)
		}
	}
	return out
}

func flatField(c Config, name string) reflect.Value { return reflect.ValueOf(c).FieldByName(name) }
