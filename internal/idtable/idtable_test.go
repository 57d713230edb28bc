package idtable

import (
	"fmt"
	"runtime"
	"testing"

	"pgregory.net/rapid"
)

type rec struct {
	id  string
	val int
}

func newTable() *Table[rec] { return New(func(r *rec) string { return r.id }) }

// A table answers as a Go map would through any sequence of puts,
// replacements and deletes, growing and shrinking on the way; every
// record stays reachable (a delete that broke a probe run would lose
// records behind it).
func TestTableActsAsAMap(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tb := newTable()
		model := map[string]*rec{}
		// Few distinct ids for many collisions and long runs; many steps
		// to grow past several sizes and shrink back.
		ids := rapid.IntRange(1, 300).Draw(rt, "ids")
		for step := range rapid.IntRange(1, 2000).Draw(rt, "steps") {
			id := fmt.Sprint("id-", rapid.IntRange(0, ids-1).Draw(rt, "id"))
			switch rapid.IntRange(0, 2).Draw(rt, "op") {
			case 0, 1:
				r := &rec{id: id, val: step}
				tb.Put(r)
				model[id] = r
			default:
				if got, want := tb.Delete(id), model[id]; got != want {
					rt.Fatalf("step %d: Delete(%s) = %v, held: %v", step, id, got, want)
				}
				delete(model, id)
			}
			if tb.Len() != len(model) {
				rt.Fatalf("step %d: Len %d, want %d", step, tb.Len(), len(model))
			}
		}
		for id, want := range model {
			if got := tb.Get(id); got != want {
				rt.Fatalf("Get(%s) = %v, want %v", id, got, want)
			}
		}
		if tb.Get("absent") != nil {
			rt.Fatal("Get of an id never put found a record")
		}
	})
}

// Emptied, a table gives its slots back.
func TestTableShrinks(t *testing.T) {
	tb := newTable()
	for i := range 100_000 {
		tb.Put(&rec{id: fmt.Sprint(i)})
	}
	for i := range 100_000 {
		tb.Delete(fmt.Sprint(i))
	}
	if len(tb.slots) > 2*minSlots {
		t.Fatalf("an emptied table keeps %d slots", len(tb.slots))
	}
}

// BenchmarkTable compares a table with the Go map it replaces: lookups,
// and heap bytes per record held (the records themselves left out).
func BenchmarkTable(b *testing.B) {
	const n = 100_000
	recs := make([]*rec, n)
	for i := range recs {
		recs[i] = &rec{id: fmt.Sprintf("01kb%022d", i)}
	}
	heapOf := func(build func() any) float64 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		v := build()
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(v)
		return float64(after.HeapAlloc-before.HeapAlloc) / n
	}
	b.Run("table", func(b *testing.B) {
		var tb *Table[rec]
		heap := heapOf(func() any {
			tb = newTable()
			for _, r := range recs {
				tb.Put(r)
			}
			return tb
		})
		i := 0
		for b.Loop() {
			if tb.Get(recs[i%n].id) == nil {
				b.Fatal("lost")
			}
			i += 7919
		}
		b.ReportMetric(heap, "heap-bytes/record")
	})
	b.Run("map", func(b *testing.B) {
		var m map[string]*rec
		heap := heapOf(func() any {
			m = map[string]*rec{}
			for _, r := range recs {
				m[r.id] = r
			}
			return m
		})
		i := 0
		for b.Loop() {
			if m[recs[i%n].id] == nil {
				b.Fatal("lost")
			}
			i += 7919
		}
		b.ReportMetric(heap, "heap-bytes/record")
	})
}
