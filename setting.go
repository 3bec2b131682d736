package sandchat

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Setting is one setting of a configuration C, declared once: the environment variable
// SANDCHAT_<Env> and its flag (Env in lower case with dashes, unless Flag says
// otherwise), what it means, its default as written, its form and bounds, and any rule
// its value must keep with the others. A table of them is where a program's flags, its
// --help, its defaults (Defaults) and its checks (Check) all come from, so no setting is
// written twice (the sandbox engine's table is sandbox.Settings, the server's is in
// cmd/sandchat).
type Setting[C any] struct {
	Env  string
	Flag string
	Def  string // the default as written ("30s", "512MiB"); "" leaves the field's zero
	Help string
	Value[C]
	// Rule refuses a value the program cannot run with beyond its form's bounds: what
	// it must agree with in other settings, or the entries of a list. Its message
	// follows "SANDCHAT_<Env>: ".
	Rule func(c *C) error
	// Serve: only the server reads it. EnvOnly: a secret, read from the environment
	// only, since flags show in ps.
	Serve, EnvOnly bool
}

// Value is a setting's form: how its text becomes the field, and the bounds the field
// keeps however it was set (by text, or by a program that builds the configuration).
type Value[C any] struct {
	Kind Kind
	// Set parses raw into the field.
	Set func(c *C, raw string) error
	// Bounds refuses a field out of the form's range; nil: any value of the form.
	Bounds func(c *C) error
	// HelpSuffix is what --help adds about the value's form and range.
	HelpSuffix string
}

// Kind is the form of a setting's text.
type Kind string

// The kinds of setting.
const (
	KindText        Kind = "text"
	KindBoolean     Kind = "boolean" // its flag may be given without a value
	KindWholeNumber Kind = "whole number"
	KindSize        Kind = "size"
	KindDuration    Kind = "duration"
	KindList        Kind = "list"
)

// FlagName is the setting's flag.
func (s Setting[C]) FlagName() string {
	if s.Flag != "" {
		return s.Flag
	}
	return strings.ReplaceAll(strings.ToLower(s.Env), "_", "-")
}

// Usage is the setting's --help line.
func (s Setting[C]) Usage() string {
	return fmt.Sprintf("%s%s (SANDCHAT_%s)", s.Help, s.HelpSuffix, s.Env)
}

// Check refuses c's value of the setting, naming its variable: its bounds, then its rule.
func (s Setting[C]) Check(c *C) error {
	for _, f := range []func(*C) error{s.Bounds, s.Rule} {
		if f == nil {
			continue
		}
		if err := f(c); err != nil {
			return fmt.Errorf("SANDCHAT_%s: %w", s.Env, err)
		}
	}
	return nil
}

// Parse sets c's field from raw, naming the variable when raw is not of its form.
func (s Setting[C]) Parse(c *C, raw string) error {
	if err := s.Set(c, raw); err != nil {
		return fmt.Errorf("SANDCHAT_%s: %w", s.Env, err)
	}
	return nil
}

// Lift makes a setting of a part of C (the sandbox engine's settings within the
// server's) a setting of C, through field, which finds the part.
func Lift[C, P any](s Setting[P], field func(*C) *P) Setting[C] {
	lift := func(f func(*P) error) func(*C) error {
		if f == nil {
			return nil
		}
		return func(c *C) error { return f(field(c)) }
	}
	return Setting[C]{
		Env: s.Env, Flag: s.Flag, Def: s.Def, Help: s.Help, Serve: s.Serve, EnvOnly: s.EnvOnly,
		Value: Value[C]{Kind: s.Kind, HelpSuffix: s.HelpSuffix, Bounds: lift(s.Bounds),
			Set: func(c *C, raw string) error { return s.Set(field(c), raw) }},
		Rule: lift(s.Rule),
	}
}

// Defaults sets every setting of table that has a default to it. A default that does
// not parse is the table's mistake (its tests hold every default): it panics.
func Defaults[C any](table []Setting[C], c *C) {
	for _, s := range table {
		if s.Def == "" {
			continue
		}
		if err := s.Parse(c, s.Def); err != nil {
			panic(fmt.Sprintf("the default of a setting does not parse: %v", err))
		}
	}
}

// Check refuses every value of c out of its setting's bounds or rule, all at once.
func Check[C any](table []Setting[C], c *C) error {
	var errs []error
	for _, s := range table {
		if err := s.Check(c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Text is any text.
func Text[C any](field func(*C) *string) Value[C] {
	return Value[C]{Kind: KindText, Set: func(c *C, raw string) error { *field(c) = raw; return nil }}
}

// OneOf is one of the words allowed.
func OneOf[C any](field func(*C) *string, allowed ...string) Value[C] {
	v := Text(field)
	v.HelpSuffix = ": " + strings.Join(allowed, ", ")
	v.Bounds = func(c *C) error { return IsOneOf(*field(c), allowed...) }
	return v
}

// IsOneOf refuses v unless it is one of the words allowed.
func IsOneOf(v string, allowed ...string) error {
	if slices.Contains(allowed, v) {
		return nil
	}
	last := len(allowed) - 1
	return fmt.Errorf("%q is not %s or %s", v, strings.Join(allowed[:last], ", "), allowed[last])
}

// Boolean is true or false.
func Boolean[C any](field func(*C) *bool) Value[C] {
	return Value[C]{Kind: KindBoolean, Set: func(c *C, raw string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("%q is not true or false", raw)
		}
		*field(c) = b
		return nil
	}}
}

// WholeNumber is a whole number from lo to hi.
func WholeNumber[C any](field func(*C) *int, lo, hi int) Value[C] {
	return Value[C]{Kind: KindWholeNumber, HelpSuffix: fmt.Sprintf(", %d to %d", lo, hi),
		Set: func(c *C, raw string) error {
			n, err := strconv.Atoi(strings.TrimSpace(raw))
			if err != nil {
				return fmt.Errorf("%q is not a whole number", raw)
			}
			*field(c) = n
			return nil
		},
		Bounds: func(c *C) error {
			if n := *field(c); n < lo || n > hi {
				return fmt.Errorf("%d is out of range (%d to %d)", n, lo, hi)
			}
			return nil
		}}
}

// Bytes is a size from lo to hi bytes, written in bytes or with KiB, MiB or GiB.
func Bytes[C any, T int | int64](field func(*C) *T, lo, hi T) Value[C] {
	return Value[C]{Kind: KindSize, HelpSuffix: fmt.Sprintf(", bytes or 512MiB, %s to %s", Size(int64(lo)), Size(int64(hi))),
		Set: func(c *C, raw string) error {
			n, err := ParseSize(raw)
			if err != nil {
				return err
			}
			if int64(T(n)) != n {
				return fmt.Errorf("%q is too large", raw)
			}
			*field(c) = T(n)
			return nil
		},
		Bounds: func(c *C) error {
			if n := *field(c); n < lo || n > hi {
				return fmt.Errorf("%s is out of range (%s to %s)", Size(int64(n)), Size(int64(lo)), Size(int64(hi)))
			}
			return nil
		}}
}

// ParseSize reads "1048576", "512MiB", "64KiB" or "2GiB".
func ParseSize(raw string) (int64, error) {
	s := strings.TrimSpace(raw)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (bytes, or a number with KiB, MiB or GiB)", raw)
	}
	if n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large", raw)
	}
	return n * mult, nil
}

// Duration is a duration in Go's form (30s, 24h) from lo to hi.
func Duration[C any](field func(*C) *time.Duration, lo, hi time.Duration) Value[C] {
	return Value[C]{Kind: KindDuration, HelpSuffix: fmt.Sprintf(", %s to %s", lo, hi),
		Set: func(c *C, raw string) error {
			d, err := time.ParseDuration(strings.TrimSpace(raw))
			if err != nil {
				return fmt.Errorf("%q is not a duration (e.g. 30s, 24h)", raw)
			}
			*field(c) = d
			return nil
		},
		Bounds: func(c *C) error {
			if d := *field(c); d < lo || d > hi {
				return fmt.Errorf("%s is out of range (%s to %s)", d, lo, hi)
			}
			return nil
		}}
}

// DurationOrOff is "off" (zero) or a duration from lo to hi.
func DurationOrOff[C any](field func(*C) *time.Duration, lo, hi time.Duration) Value[C] {
	v := Duration(field, lo, hi)
	v.HelpSuffix = fmt.Sprintf(", off or %s to %s", lo, hi)
	set, bounds := v.Set, v.Bounds
	v.Set = func(c *C, raw string) error {
		if strings.TrimSpace(raw) == "off" {
			*field(c) = 0
			return nil
		}
		return set(c, raw)
	}
	v.Bounds = func(c *C) error {
		if *field(c) == 0 {
			return nil
		}
		return bounds(c)
	}
	return v
}

// List is comma-separated values, blanks dropped.
func List[C any](field func(*C) *[]string) Value[C] {
	return Value[C]{Kind: KindList, Set: func(c *C, raw string) error {
		var l []string
		for _, s := range strings.Split(raw, ",") {
			if s = strings.TrimSpace(s); s != "" {
				l = append(l, s)
			}
		}
		*field(c) = l
		return nil
	}}
}
