package fsm

import (
	"slices"
	"strings"
	"unique"
)

// interner makes tasks share equal immutable values: a batch of tasks
// usually repeats its submitter, capability, command, environment and
// labels, and each decoded copy of them cost a replica about 400 bytes
// per task. Strings go through the unique package (weakly held); slices
// and maps through bounded caches keyed by their contents, cleared when
// full so they never hold more than a few thousand values alive. Only
// memory is shared: records are immutable, so no state can tell.
type interner struct {
	slices map[string][]string
	maps   map[string]map[string]string
}

// internCacheLimit bounds each cache; past it the cache starts afresh.
const internCacheLimit = 4096

func newInterner() *interner {
	return &interner{slices: map[string][]string{}, maps: map[string]map[string]string{}}
}

func internString(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

func (in *interner) slice(v []string) []string {
	if len(v) == 0 {
		return v
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
		return m
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

// task shares t's repeated values with earlier tasks. t must not be in
// the store yet (it is modified).
func (in *interner) task(t *Task) {
	s := &t.Spec
	s.Capability = internString(s.Capability)
	s.CapabilityVersion = internString(s.CapabilityVersion)
	s.Submitter = internString(s.Submitter)
	s.Command = in.slice(s.Command)
	s.Env = in.stringMap(s.Env)
	s.RequiredLabels = in.stringMap(s.RequiredLabels)
	s.PreferredLabels = in.stringMap(s.PreferredLabels)
	// Event kinds repeat; of the messages, the submission's and the
	// reasons for waiting do (the others name attempts and nodes).
	for i := range t.Timeline {
		t.Timeline[i].Kind = internString(t.Timeline[i].Kind)
		if i == 0 || t.Timeline[i].Kind == "waiting" {
			t.Timeline[i].Message = internString(t.Timeline[i].Message)
		}
	}
	t.LastExplain = internString(t.LastExplain)
}
