// Package check holds the small validations that the wire types, the
// configuration and the FSM share, so that each rule is written once: what
// an id may look like, and how several problems are reported together.
package check

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ID reports whether s may name a server, node, task or attempt: 1 to 64
// letters, digits, '.', '_' or '-', starting with a letter or digit (so
// that it is safe in a URL path and a file name).
func ID(s string) bool { return idPattern.MatchString(s) }

var refPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}(@[0-9]{1,20})?(\.[0-9]{1,9}){0,3}$`)

// Ref reports whether s may name a job or a task as the cluster names
// them: an ID, or the ids it makes from one, a periodic run
// ("<job>@<slot>") and a stage instance's task ("<job or run>.<stage>.<instance>[.<generation>]").
func Ref(s string) bool { return refPattern.MatchString(s) }

// MaxDatasetNameBytes bounds a dataset's name.
const MaxDatasetNameBytes = 128

// DatasetName checks a dataset's name, the one rule for a task's inputs
// and outputs, a job stage's outputs, what an agent serves and what it
// reports: 1 to MaxDatasetNameBytes bytes, without '=', '/', spaces or
// NUL, and not "." or "..", so that it is a file name of its own and
// fits NAME=PATH settings.
func DatasetName(name string) error {
	if name == "" || len(name) > MaxDatasetNameBytes || strings.ContainsAny(name, "=/ \x00") || name == "." || name == ".." {
		return fmt.Errorf("dataset name %q: want 1 to %d bytes, not . or .., without '=', '/', spaces or NUL", name, MaxDatasetNameBytes)
	}
	return nil
}

// JoinSorted joins the messages of errs, sorted and separated by "; ",
// into one error, or returns nil for none. Sorting makes the message
// stable when the problems were found by ranging over a map.
func JoinSorted(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	slices.Sort(msgs)
	return errors.New(strings.Join(msgs, "; "))
}
