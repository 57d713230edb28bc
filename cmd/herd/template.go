package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// outputTemplate is the small template language of -o template=: text
// with {{.a.b}} (a field of the JSON answer by its JSON names; {{.}} the
// value itself) and {{range .list}}…{{end}} (the body once per element,
// '.' being the element). It is hand-written rather than text/template,
// whose reflection keeps every exported method of the binary alive and
// would add megabytes to every agent's binary for a CLI convenience.
type outputTemplate []templatePart

type templatePart struct {
	text  string
	path  []string // a value to print (path may be empty: '.')
	value bool
	body  outputTemplate // a range over path
}

func parseTemplate(text string) (outputTemplate, error) {
	text = strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(text)
	t, rest, err := parseParts(text, false)
	if err != nil {
		return nil, err
	}
	if rest != "" {
		return nil, errors.New("{{end}} without {{range}}")
	}
	return t, nil
}

// parseParts reads parts up to the end of text, or up to an {{end}}
// when inRange, returning what follows it.
func parseParts(text string, inRange bool) (outputTemplate, string, error) {
	var out outputTemplate
	for {
		open := strings.Index(text, "{{")
		if open < 0 {
			if inRange {
				return nil, "", errors.New("{{range}} without {{end}}")
			}
			if text != "" {
				out = append(out, templatePart{text: text})
			}
			return out, "", nil
		}
		if open > 0 {
			out = append(out, templatePart{text: text[:open]})
		}
		end := strings.Index(text[open:], "}}")
		if end < 0 {
			return nil, "", fmt.Errorf("unclosed action %q", text[open:])
		}
		action := strings.TrimSpace(text[open+2 : open+end])
		text = text[open+end+2:]
		switch {
		case action == "end":
			if !inRange {
				return out, "{{end}}" + text, nil
			}
			return out, text, nil
		case strings.HasPrefix(action, "range "):
			path, err := parsePath(strings.TrimSpace(strings.TrimPrefix(action, "range ")))
			if err != nil {
				return nil, "", err
			}
			body, rest, err := parseParts(text, true)
			if err != nil {
				return nil, "", err
			}
			out = append(out, templatePart{path: path, body: body})
			text = rest
		default:
			path, err := parsePath(action)
			if err != nil {
				return nil, "", err
			}
			out = append(out, templatePart{path: path, value: true})
		}
	}
}

func parsePath(s string) ([]string, error) {
	if s == "." {
		return nil, nil
	}
	if !strings.HasPrefix(s, ".") || strings.ContainsAny(s, " \t") || strings.HasSuffix(s, ".") {
		return nil, fmt.Errorf("%q: want .field.field, {{range .field}} or {{end}}", s)
	}
	return strings.Split(s[1:], "."), nil
}

func (t outputTemplate) fill(w *strings.Builder, dot any) error {
	for _, p := range t {
		switch {
		case p.text != "":
			w.WriteString(p.text)
		case p.value:
			v, err := lookup(dot, p.path)
			if err != nil {
				return err
			}
			writeValue(w, v)
		default:
			v, err := lookup(dot, p.path)
			if err != nil {
				return err
			}
			list, ok := v.([]any)
			if !ok && v != nil {
				return fmt.Errorf("range over .%s: not a list", strings.Join(p.path, "."))
			}
			for _, el := range list {
				if err := p.body.fill(w, el); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func lookup(v any, path []string) (any, error) {
	for i, name := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf(".%s: not an object", strings.Join(path[:i], "."))
		}
		v, ok = m[name]
		if !ok {
			return nil, fmt.Errorf(".%s: no such field", strings.Join(path[:i+1], "."))
		}
	}
	return v, nil
}

// writeValue prints a value as a shell wants it: strings bare, numbers
// and booleans as JSON writes them, null as nothing, anything else as
// JSON.
func writeValue(w *strings.Builder, v any) {
	switch x := v.(type) {
	case nil:
	case string:
		w.WriteString(x)
	default:
		b, _ := json.Marshal(x)
		w.Write(b)
	}
}
