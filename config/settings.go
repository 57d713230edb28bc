package config

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A Setting is one setting of a configuration C, declared once: its name
// in the HCL file ("block.name" inside a block), its HERD_* environment
// variable and its command-line flag (either may be empty), one line of
// doc, and the field it sets. The file, environment and flag handling of
// a Table, and the configuration reference, are all derived from it.
type Setting[C any] struct {
	Name string
	Env  string
	Flag string
	Doc  string
	// field returns a pointer to the field in c: *string, *bool, *int,
	// *int64, *uint64, *float64, *time.Duration, *[]string or
	// *map[string]string.
	field func(c *C) any
}

// settable are the field types a Setting can hold.
type settable interface {
	string | bool | int | int64 | uint64 | float64 | time.Duration | []string | map[string]string
}

// Field declares a setting of a field of type T.
func Field[C any, T settable](name, env, flagName, doc string, field func(*C) *T) Setting[C] {
	return Setting[C]{Name: name, Env: env, Flag: flagName, Doc: doc, field: func(c *C) any { return field(c) }}
}

// Set parses text into the setting's field of c. A list is
// comma-separated (empty items dropped); a map is k=v,k=v and is merged
// into what the field holds.
func (s Setting[C]) Set(c *C, text string) error {
	switch p := s.field(c).(type) {
	case *string:
		*p = text
	case *bool:
		v, err := strconv.ParseBool(text)
		if err != nil {
			return fmt.Errorf("%q is not true or false", text)
		}
		*p = v
	case *int:
		v, err := strconv.Atoi(text)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", text)
		}
		*p = v
	case *int64:
		v, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", text)
		}
		*p = v
	case *uint64:
		v, err := strconv.ParseUint(text, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a non-negative whole number", text)
		}
		*p = v
	case *float64:
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", text)
		}
		*p = v
	case *time.Duration:
		v, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Errorf("%q is not a duration such as 500ms, 5s or 2m", text)
		}
		*p = v
	case *[]string:
		*p = SplitList(text)
	case *map[string]string:
		if *p == nil {
			*p = map[string]string{}
		}
		for _, item := range SplitList(text) {
			k, v, ok := strings.Cut(item, "=")
			if !ok || k == "" {
				return fmt.Errorf("%q is not key=value", item)
			}
			(*p)[k] = v
		}
	default:
		return fmt.Errorf("setting %s holds a %T, which cannot be set", s.Name, p)
	}
	return nil
}

// Value formats the setting's value in c as Set reads it.
func (s Setting[C]) Value(c *C) string {
	switch p := s.field(c).(type) {
	case *string:
		return *p
	case *bool:
		return strconv.FormatBool(*p)
	case *int:
		return strconv.Itoa(*p)
	case *int64:
		return strconv.FormatInt(*p, 10)
	case *uint64:
		return strconv.FormatUint(*p, 10)
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *time.Duration:
		return p.String()
	case *[]string:
		return strings.Join(*p, ",")
	case *map[string]string:
		var items []string
		for _, k := range slices.Sorted(maps.Keys(*p)) {
			items = append(items, k+"="+(*p)[k])
		}
		return strings.Join(items, ",")
	}
	return ""
}

// A Table is every setting of a configuration, with its defaults.
type Table[C any] struct {
	Settings []Setting[C]
	// Defaults returns the configuration every setting starts from.
	Defaults func() C
	// File says whether the settings can be given in an HCL file (under
	// their names).
	File bool
}

// ApplyEnv applies, on top of c, the settings whose variables lookup
// finds. All problems are reported together, by variable.
func (t Table[C]) ApplyEnv(c *C, lookup func(string) (string, bool)) error {
	var errs []error
	for _, s := range t.Settings {
		if s.Env == "" {
			continue
		}
		if v, ok := lookup(s.Env); ok {
			if err := s.Set(c, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.Env, err))
			}
		}
	}
	return joinSorted(errs)
}

// BindFlags defines a flag on fs for every setting that has one, typed
// as its field is. Only flags given on the command line take effect: the
// function returned applies them on top of c, after the file and the
// environment.
func (t Table[C]) BindFlags(fs *flag.FlagSet) func(c *C) error {
	defaults := t.Defaults()
	bound := map[string]Setting[C]{}
	for _, s := range t.Settings {
		if s.Flag == "" {
			continue
		}
		bound[s.Flag] = s
		usage := t.usage(s, &defaults)
		var zero C
		switch s.field(&zero).(type) {
		case *bool:
			fs.Bool(s.Flag, false, usage)
		case *int:
			fs.Int(s.Flag, 0, usage)
		case *int64:
			fs.Int64(s.Flag, 0, usage)
		case *uint64:
			fs.Uint64(s.Flag, 0, usage)
		case *float64:
			fs.Float64(s.Flag, 0, usage)
		case *time.Duration:
			fs.Duration(s.Flag, 0, usage)
		case *map[string]string:
			fs.Var(&textFlag{}, s.Flag, s.Doc+" as `k=v,…`, repeatable"+strings.TrimPrefix(usage, s.Doc))
		default:
			fs.String(s.Flag, "", usage)
		}
	}
	return func(c *C) error {
		var errs []error
		fs.Visit(func(f *flag.Flag) {
			s, ok := bound[f.Name]
			if !ok {
				return
			}
			texts := []string{f.Value.String()}
			if tf, ok := f.Value.(*textFlag); ok {
				texts = tf.given
			}
			for _, text := range texts {
				if err := s.Set(c, text); err != nil {
					errs = append(errs, fmt.Errorf("-%s: %w", f.Name, err))
				}
			}
		})
		return joinSorted(errs)
	}
}

// textFlag holds every text a repeatable flag was given, parsed when
// applied.
type textFlag struct{ given []string }

func (f *textFlag) String() string {
	if len(f.given) == 0 {
		return ""
	}
	return f.given[len(f.given)-1]
}

func (f *textFlag) Set(text string) error {
	f.given = append(f.given, text)
	return nil
}

// usage is a flag's help: the doc, then the default and where else the
// setting can be given.
func (t Table[C]) usage(s Setting[C], defaults *C) string {
	var also []string
	if d := s.Value(defaults); d != "" && d != "0" && d != "0s" && d != "false" {
		also = append(also, "default "+d)
	}
	if s.Env != "" {
		also = append(also, s.Env)
	}
	if t.File {
		also = append(also, s.Name)
	}
	if len(also) == 0 {
		return s.Doc
	}
	return s.Doc + " (" + strings.Join(also, "; ") + ")"
}

// Reference is the table's configuration reference, a Markdown table
// with a row per setting: its file name (for a table with a file), its
// variable, its flag, its default and its doc.
func (t Table[C]) Reference() string {
	defaults := t.Defaults()
	code := func(s string) string {
		if s == "" {
			return ""
		}
		return "`" + s + "`"
	}
	var b strings.Builder
	if t.File {
		b.WriteString("| setting | environment | flag | default | meaning |\n|---|---|---|---|---|\n")
	} else {
		b.WriteString("| flag | environment | default | meaning |\n|---|---|---|---|\n")
	}
	for _, s := range t.Settings {
		flagName := ""
		if s.Flag != "" {
			flagName = "-" + s.Flag
		}
		def := s.Value(&defaults)
		if t.File {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", code(s.Name), code(s.Env), code(flagName), code(def), s.Doc)
		} else {
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", code(flagName), code(s.Env), code(def), s.Doc)
		}
	}
	return b.String()
}
