package fsm

import (
	"slices"
	"strings"
	"unique"
)

// interner makes tasks share equal immutable values: a batch of tasks
// usually repeats its whole shape (priority, command, environment,
// capability, labels, resources, limits, submitter), and each decoded
// copy of it cost a replica about 500 bytes per task. Shapes are shared
// whole, keyed by their binary form; the strings, slices and maps of a
// shape not seen before are shared with earlier shapes where equal (a
// submitter or a command often outlives one shape). Strings go through
// the unique package (weakly held); shapes, slices and maps through
// bounded caches keyed by their contents, cleared when full so they never
// hold more than a few thousand values alive. Only memory is shared:
// records are immutable, so no state can tell.
type interner struct {
	shapes map[string]*TaskShape
	slices map[string][]string
	maps   map[string]map[string]string
}

// internCacheLimit bounds each cache; past it the cache starts afresh.
const internCacheLimit = 4096

func newInterner() *interner {
	return &interner{shapes: map[string]*TaskShape{}, slices: map[string][]string{}, maps: map[string]map[string]string{}}
}

func internString(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

func (in *interner) slice(v []string) []string {
	if len(v) == 0 {
		return nil
	}
	key := strings.Join(v, "\x00")
	if got, ok := in.slices[key]; ok && slices.Equal(got, v) {
		return got
	}
	if len(in.slices) >= internCacheLimit {
		clear(in.slices)
	}
	for i := range v {
		v[i] = internString(v[i])
	}
	in.slices[key] = v
	return v
}

func (in *interner) stringMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	key := b.String()
	if got, ok := in.maps[key]; ok && len(got) == len(m) {
		return got
	}
	if len(in.maps) >= internCacheLimit {
		clear(in.maps)
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[internString(k)] = internString(v)
	}
	in.maps[key] = out
	return out
}

// known is the shape whose binary form is key, if the interner holds it
// (nil otherwise, and on a nil interner).
func (in *interner) known(key []byte) *TaskShape {
	if in == nil {
		return nil
	}
	return in.shapes[string(key)]
}

// shape returns the shared shape equal to sh: the one held under sh's
// binary form (key, or computed when nil), or a copy of sh with its
// values shared, held from now on. Empty maps and slices become nil, so
// equal shapes are equal however they were decoded. No shape (a record
// restored from a snapshot that had none) is the zero one: a stored
// record always has a shape to read.
func (in *interner) shape(sh *TaskShape, key []byte) *TaskShape {
	if sh == nil {
		sh, key = &TaskShape{}, nil
	}
	if key == nil {
		key = appendShape(nil, sh)
	}
	if got, ok := in.shapes[string(key)]; ok {
		return got
	}
	if len(in.shapes) >= internCacheLimit {
		clear(in.shapes)
	}
	c := *sh
	in.share(&c)
	in.shapes[string(key)] = &c
	return &c
}

// task shares t's repeated values with earlier tasks. shapeKey is the
// binary form of t's shape when known (nil: computed); shared says the
// shape already is the interner's. t must not be in the store yet (it is
// modified).
func (in *interner) task(t *Task, shapeKey []byte, shared bool) {
	if !shared {
		t.Spec.TaskShape = in.shape(t.Spec.TaskShape, shapeKey)
	}
	// Of the events' messages, the submission's and the reasons for
	// waiting repeat (the others name attempts and nodes).
	t.submitted = internString(t.submitted)
	if t.more != nil {
		for i := range t.more.timeline {
			if t.more.timeline[i].Kind == EventWaiting {
				t.more.timeline[i].Message = internString(t.more.timeline[i].Message)
			}
		}
		t.more.lastExplain = internString(t.more.lastExplain)
	}
}
