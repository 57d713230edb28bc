package check

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// DidYouMean suggests the known name closest to an unknown one: ` (did
// you mean "x"?)`, or "" when none is within two edits (or shares the
// unknown name's first four letters).
func DidYouMean(unknown string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		d := editDistance(strings.ToLower(unknown), strings.ToLower(k))
		if d < bestDist || (d == bestDist && best != "" && k < best) {
			best, bestDist = k, d
		}
	}
	if best == "" {
		for _, k := range known {
			if len(unknown) >= 4 && strings.HasPrefix(k, unknown[:4]) {
				best = k
				break
			}
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// UnknownField describes a JSON field (as encoding/json quotes it) that
// v's type does not have, naming the nearest one it has.
func UnknownField(quoted string, v any) string {
	name, err := strconv.Unquote(quoted)
	if err != nil {
		name = quoted
	}
	return "unknown field " + quoted + DidYouMean(name, JSONFields(v))
}

// JSONFields lists the JSON names of the fields of v's type and of every
// struct type reachable from it, sorted: the names a JSON body for v may
// hold at any depth.
func JSONFields(v any) []string {
	seen := map[reflect.Type]bool{}
	names := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" {
				walk(f.Type)
				continue
			}
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			names[name] = true
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(v))
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
