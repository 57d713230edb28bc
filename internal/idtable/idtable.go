// Package idtable is a hash table of records keyed by an id each record
// holds: a slot keeps a pointer and a byte of the hash, where a Go map
// from id to record also keeps the id's string header, so a table is
// about a third of the size of that map for the same records (see
// BENCHMARKS.md). Replicas and the leader keep one entry per task in such
// tables.
package idtable

import "hash/maphash"

// Table holds records of type T by the id key(record) returns. Ids
// must not change while a record is held. A Table is not safe for
// concurrent use; its zero value is not usable (see New).
type Table[T any] struct {
	key   func(*T) string
	seed  maphash.Seed
	slots []*T
	// tags holds, per slot, 0 when it is empty, or 0x80 and seven bits of
	// the hash of its record's id: most mismatches are told apart without
	// reading the record.
	tags []uint8
	n    int
}

// minSlots is the smallest table; tables grow past 13/16 full (the
// tags keep the longer probe runs of a full table cheap to scan) and
// shrink below 1/8.
const minSlots = 16

// New returns an empty table of records keyed by key.
func New[T any](key func(*T) string) *Table[T] {
	return &Table[T]{key: key, seed: maphash.MakeSeed(), slots: make([]*T, minSlots), tags: make([]uint8, minSlots)}
}

// Len is how many records the table holds.
func (t *Table[T]) Len() int { return t.n }

func (t *Table[T]) hash(id string) (home int, tag uint8) {
	h := maphash.String(t.seed, id)
	return int(h & uint64(len(t.slots)-1)), uint8(h>>57) | 0x80
}

// find is the slot holding id, or the empty slot that ends its probe,
// with id's tag.
func (t *Table[T]) find(id string) (slot int, tag uint8, found bool) {
	i, tag := t.hash(id)
	mask := len(t.slots) - 1
	for {
		switch t.tags[i] {
		case 0:
			return i, tag, false
		case tag:
			if t.key(t.slots[i]) == id {
				return i, tag, true
			}
		}
		i = (i + 1) & mask
	}
}

// Get returns the record with id, or nil.
func (t *Table[T]) Get(id string) *T {
	if i, _, ok := t.find(id); ok {
		return t.slots[i]
	}
	return nil
}

// Put holds r, replacing the record with its id if there is one.
func (t *Table[T]) Put(r *T) {
	id := t.key(r)
	i, tag, ok := t.find(id)
	if ok {
		t.slots[i] = r
		return
	}
	if (t.n+1)*16 > len(t.slots)*13 {
		t.resize(len(t.slots) * 2)
		i, tag, _ = t.find(id)
	}
	t.slots[i], t.tags[i] = r, tag
	t.n++
}

// Delete drops the record with id and returns it (nil if there was
// none).
func (t *Table[T]) Delete(id string) *T {
	i, _, ok := t.find(id)
	if !ok {
		return nil
	}
	r := t.slots[i]
	// Backward-shift deletion: move later records of the probe run into
	// the gap when the gap lies between their home and them, so no probe
	// ever stops early at it.
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.tags[j] != 0; j = (j + 1) & mask {
		home, _ := t.hash(t.key(t.slots[j]))
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i], t.tags[i] = t.slots[j], t.tags[j]
			i = j
		}
	}
	t.slots[i], t.tags[i] = nil, 0
	t.n--
	if len(t.slots) > minSlots && t.n*8 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
	return r
}

func (t *Table[T]) resize(size int) {
	old, oldTags := t.slots, t.tags
	t.slots, t.tags = make([]*T, size), make([]uint8, size)
	for i, r := range old {
		if oldTags[i] != 0 {
			j, _, _ := t.find(t.key(r))
			t.slots[j], t.tags[j] = r, oldTags[i]
		}
	}
}
